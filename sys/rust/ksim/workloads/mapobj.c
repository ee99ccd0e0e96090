/*
 * mapobj [calls [path]]: maps a shared object the way a run-time linker
 * does (open(2), read(2) of its ELF and program headers, one mmap(2) of
 * each loadable segment at a base of its own, close(2)), calls its entry
 * point `calls` times (default 1000), checks each result against its own
 * computation, unmaps the object with munmap(2) and exits 0 when every
 * result was right.  The object is /usr/lib/libsecond.so by default.
 */
#include "ksim_workload.h"
#include "second.h"

#define	PAGE_MASK	4095UL
#define	PT_LOAD		1
#define	PF_X		1
#define	PF_W		2
#define	PF_R		4

static unsigned char headers[4096];

static uint64_t
u64_at(size_t off)
{
	uint64_t v;

	memcpy(&v, headers + off, sizeof(v));
	return (v);
}

static uint32_t
u32_at(size_t off)
{
	uint32_t v;

	memcpy(&v, headers + off, sizeof(v));
	return (v);
}

int
main(int argc, char **argv)
{
	uint64_t calls = arg_u64(argc, argv, 1, 1000);
	const char *path = argc > 2 ? argv[2] : "/usr/lib/libsecond.so";
	uint64_t (*entry)(uint64_t);
	uint64_t phoff, phnum, phentsize, lo = ~0UL, hi = 0;
	char *base;
	int fd, bad = 0;

	fd = open(path, O_RDONLY);
	if (fd < 0) {
		put_str("mapobj: cannot open the object\n");
		return (2);
	}
	if (read(fd, headers, sizeof(headers)) < 64 ||
	    headers[0] != 0x7f || headers[1] != 'E') {
		put_str("mapobj: not an ELF file\n");
		return (2);
	}
	phoff = u64_at(32);
	phentsize = headers[54] | headers[55] << 8;
	phnum = headers[56] | headers[57] << 8;
	if (phoff + phnum * phentsize > sizeof(headers)) {
		put_str("mapobj: program headers out of reach\n");
		return (2);
	}
	for (uint64_t i = 0; i < phnum; i++) {
		size_t ph = phoff + i * phentsize;

		if (u32_at(ph) != PT_LOAD)
			continue;
		if (u64_at(ph + 16) < lo)
			lo = u64_at(ph + 16);
		if (u64_at(ph + 16) + u64_at(ph + 40) > hi)
			hi = u64_at(ph + 16) + u64_at(ph + 40);
	}
	lo &= ~PAGE_MASK;
	/* Reserve the whole span, then map each segment over it. */
	base = mmap(0, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANON, -1, 0);
	if (base == MAP_FAILED) {
		put_str("mapobj: no room\n");
		return (2);
	}
	base -= lo;
	for (uint64_t i = 0; i < phnum; i++) {
		size_t ph = phoff + i * phentsize;
		uint64_t flags = u32_at(ph + 4), vaddr = u64_at(ph + 16);
		uint64_t off = u64_at(ph + 8), filesz = u64_at(ph + 32);
		int prot = 0;

		if (u32_at(ph) != PT_LOAD)
			continue;
		if (flags & PF_R)
			prot |= PROT_READ;
		if (flags & PF_W)
			prot |= PROT_WRITE;
		if (flags & PF_X)
			prot |= PROT_EXEC;
		if (mmap(base + (vaddr & ~PAGE_MASK),
		    filesz + (vaddr & PAGE_MASK), prot, MAP_PRIVATE | MAP_FIXED,
		    fd, off & ~PAGE_MASK) == MAP_FAILED) {
			put_str("mapobj: mmap of a segment failed\n");
			return (2);
		}
	}
	close(fd);
	entry = (uint64_t (*)(uint64_t))(base + u64_at(24));
	for (uint64_t i = 0; i < calls; i++)
		if (entry(i) != second_work(i))
			bad = 1;
	if (munmap(base + lo, hi - lo) != 0)
		bad = 1;
	put_str(bad ? "mapobj: wrong\n" : "mapobj: ok\n");
	return (bad);
}
