/* server/blas.h: putting OpenBLAS on the best kernel for this CPU. */
#ifndef ATTND_BLAS_H
#define ATTND_BLAS_H

/* OpenBLAS picks its kernel when it loads, from OPENBLAS_CORETYPE or its
 * own CPU detection, and either can name a slow one (a virtual CPU it does
 * not know, or an environment that pins "Haswell" on an AVX-512 machine).
 * `coretype` is "auto" (the kernel for the widest vectors this CPU has),
 * "library" (leave OpenBLAS's choice alone) or an OpenBLAS core name.
 * attnd runs BLAS single-threaded inside its own tasks, so OpenBLAS's thread
 * pool only competes for the CPUs (its idle threads spin); it is not
 * started when OPENBLAS_NUM_THREADS is 1 at load time.
 * When the kernel loaded now is not the one wanted, or the pool is on, this
 * sets OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS=1 and re-executes the
 * program with `argv`, once; it returns only when nothing needs to change
 * or the re-execution failed. Logs a change of kernel as a JSON line on
 * stderr. Main thread, before any other thread starts. */
void attnd_blas_select(const char *coretype, char **argv);

#endif
