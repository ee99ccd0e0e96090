/* Host shim for FreeBSD's libpmcstat.h on Linux, which has no libelf
 * headers: the ELF types its prototypes name, left opaque (the print
 * loop uses none of them). Written for the benchmark; see
 * tools/bench/freebsd-build. */
#ifndef BENCH_SHIM_GELF_H
#define BENCH_SHIM_GELF_H
typedef struct bench_elf Elf;
typedef struct bench_elf_scn Elf_Scn;
typedef struct bench_gelf_shdr GElf_Shdr;
#endif
