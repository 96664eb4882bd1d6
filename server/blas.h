/* server/blas.h: putting OpenBLAS on the best kernel for this CPU. */
#ifndef ATTND_BLAS_H
#define ATTND_BLAS_H

/* OpenBLAS picks its kernel when it loads, from OPENBLAS_CORETYPE or its
 * own CPU detection, and either can name a slow one (a virtual CPU it does
 * not know, or an environment that pins "Haswell" on an AVX-512 machine).
 * `coretype` is "auto" (the kernel for the widest vectors this CPU has),
 * "library" (leave OpenBLAS's choice alone) or an OpenBLAS core name. When
 * that is not the kernel loaded now, this sets OPENBLAS_CORETYPE and
 * re-executes the program with `argv`, once; it returns only when nothing
 * needs to change or the re-execution failed. Logs the change as a JSON
 * line on stderr. Main thread, before any other thread starts. */
void attnd_blas_select(const char *coretype, char **argv);

#endif
