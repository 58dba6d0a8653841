// Clang's thread-safety analysis, and the mutexes it understands.
//
// What a mutex guards is written at the member (UCFS_GUARDED_BY), what a
// method needs at the method (UCFS_REQUIRES), and the build checks both
// (-Wthread-safety, an error with UCFS_WERROR). std::mutex carries no
// annotations in libstdc++, so guarded state sits behind these thin
// wrappers, as LevelDB's port::Mutex and Abseil's Mutex do.
#ifndef UCFS_BASE_THREAD_ANNOTATIONS_H_
#define UCFS_BASE_THREAD_ANNOTATIONS_H_

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define UCFS_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define UCFS_THREAD_ANNOTATION_(x)
#endif

#define UCFS_CAPABILITY(x) UCFS_THREAD_ANNOTATION_(capability(x))
#define UCFS_SCOPED_CAPABILITY UCFS_THREAD_ANNOTATION_(scoped_lockable)
#define UCFS_GUARDED_BY(x) UCFS_THREAD_ANNOTATION_(guarded_by(x))
#define UCFS_PT_GUARDED_BY(x) UCFS_THREAD_ANNOTATION_(pt_guarded_by(x))
#define UCFS_REQUIRES(...) UCFS_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define UCFS_REQUIRES_SHARED(...) UCFS_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#define UCFS_ACQUIRE(...) UCFS_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define UCFS_ACQUIRE_SHARED(...) UCFS_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define UCFS_RELEASE(...) UCFS_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define UCFS_RELEASE_SHARED(...) UCFS_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define UCFS_RELEASE_GENERIC(...) UCFS_THREAD_ANNOTATION_(release_generic_capability(__VA_ARGS__))
#define UCFS_EXCLUDES(...) UCFS_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define UCFS_NO_THREAD_SAFETY_ANALYSIS UCFS_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace ucfs {

class UCFS_CAPABILITY("mutex") Mutex {
 public:
  void Lock() UCFS_ACQUIRE() { mu_.lock(); }
  void Unlock() UCFS_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class UCFS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) UCFS_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() UCFS_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Many readers or one writer.
class UCFS_CAPABILITY("shared mutex") SharedMutex {
 public:
  void Lock() UCFS_ACQUIRE() { mu_.lock(); }
  void Unlock() UCFS_RELEASE() { mu_.unlock(); }
  void LockShared() UCFS_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() UCFS_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class UCFS_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) UCFS_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() UCFS_RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class UCFS_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) UCFS_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() UCFS_RELEASE_GENERIC() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace ucfs

#endif  // UCFS_BASE_THREAD_ANNOTATIONS_H_
