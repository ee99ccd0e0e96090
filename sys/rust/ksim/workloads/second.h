/*
 * The work of the shared object libsecond.so, which mapobj maps at run
 * time: the object exports it as its entry point, and mapobj computes
 * it itself to check what the mapped code returned.
 */
#ifndef SECOND_H
#define SECOND_H

static inline uint64_t
second_work(uint64_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15UL ^ n;

	for (uint64_t i = 0; i < 500; i++) {
		h ^= h >> 29;
		h *= 0xbf58476d1ce4e5b9UL;
		if (h & 1)
			h += i;
	}
	return (h);
}

#endif
