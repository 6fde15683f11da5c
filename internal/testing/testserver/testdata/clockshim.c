// clockshim is an LD_PRELOAD library that steps one process's wall clock,
// for tests of what a server does when its clock jumps (an NTP step). It
// offsets gettimeofday, time and clock_gettime(CLOCK_REALTIME[_COARSE]) by
// a number of nanoseconds that it reads, on every call, from the 8-byte
// file named by $DLOCK_CLOCK_OFFSET_FILE (mapped into memory, written by
// the test). Monotonic clocks are left alone, as an NTP step leaves them.
//
// It asks the kernel for the time itself (syscall) instead of calling the
// real libc functions: finding those with dlsym allocates memory, and when
// the process's malloc is jemalloc (redis-server's), jemalloc's start-up
// calls clock_gettime again before anything is set up. That recursion is
// why libfaketime cannot run redis-server (libfaketime issue #130).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int64_t *offset_ns; // the mapped file, or &no_offset; NULL until the first call
static int64_t no_offset;

static int64_t offset(void) {
  int64_t *p = __atomic_load_n(&offset_ns, __ATOMIC_ACQUIRE);
  if (!p) {
    // Threads racing here both map the file: harmless.
    const char *path = getenv("DLOCK_CLOCK_OFFSET_FILE");
    void *m = MAP_FAILED;
    if (path) {
      int fd = open(path, O_RDONLY);
      if (fd >= 0) {
        m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
      }
    }
    p = m == MAP_FAILED ? &no_offset : (int64_t *)m;
    __atomic_store_n(&offset_ns, p, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static int wall(clockid_t id, struct timespec *ts) {
  if (syscall(SYS_clock_gettime, id, ts) != 0) {
    return -1;
  }
  int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
  ts->tv_sec = ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
  return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
    return wall(id, ts);
  }
  return syscall(SYS_clock_gettime, id, ts);
}

// struct timeval, declared here so that no header's declaration of
// gettimeofday (whose second parameter's type varies) has to match.
struct shim_timeval {
  long tv_sec;
  long tv_usec;
};

int gettimeofday(struct shim_timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  if (wall(CLOCK_REALTIME, &ts) != 0) {
    return -1;
  }
  if (tv) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  if (wall(CLOCK_REALTIME, &ts) != 0) {
    return (time_t)-1;
  }
  if (t) {
    *t = ts.tv_sec;
  }
  return ts.tv_sec;
}
