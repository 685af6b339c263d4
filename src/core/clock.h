/* Wall-clock seconds for timing: one monotonic clock for every module (step times, timeouts,
 * throughput), so differences of its values are durations that no clock adjustment changes.
 * Exports: mg_clock_seconds. Needs: nothing. */
#ifndef MG_CORE_CLOCK_H
#define MG_CORE_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC); only differences mean anything. */
double mg_clock_seconds(void);

#endif
