// Runs repeated with a period, between a whole and one slice of it: the
// geometry a tensor-parallel merge and an affine map share.
#ifndef UCFS_BASE_PERIODIC_RUNS_H_
#define UCFS_BASE_PERIODIC_RUNS_H_

#include <cstdint>

namespace ucfs {

// Run i (i < count) covers [start + i * period, + length) of the whole and
// [slice_start + i * slice_period, + length) of the slice, in some unit
// (elements of an affine map, bytes of a gathered storage run).
struct PeriodicRuns {
  uint64_t start = 0;
  uint64_t period = 0;
  uint64_t slice_start = 0;
  uint64_t slice_period = 0;
  uint64_t count = 0;
  uint64_t length = 0;

  // The same runs in a unit `unit` times larger (elements to bytes; the
  // callers' sizes are bounded, so the products fit).
  PeriodicRuns Scaled(uint64_t unit) const {
    return {start * unit,        period * unit, slice_start * unit,
            slice_period * unit, count,         length * unit};
  }
};

}  // namespace ucfs

#endif  // UCFS_BASE_PERIODIC_RUNS_H_
