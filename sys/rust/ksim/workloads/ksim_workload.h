/*
 * What the workload programs have instead of a C library: FreeBSD system
 * calls (syscalls_<arch>.S), the entry point (crt0_<arch>.S) and a few
 * helpers (ksim_workload.c).  Programs define
 *
 *	int main(int argc, char **argv);
 *
 * and return their exit status.
 */
#ifndef KSIM_WORKLOAD_H
#define KSIM_WORKLOAD_H

typedef unsigned long size_t;
typedef long ssize_t;
typedef unsigned long uint64_t;
typedef unsigned int uint32_t;
typedef int pid_t;

extern int errno;

void _exit(int status) __attribute__((noreturn));
ssize_t write(int fd, const void *buf, size_t len);
pid_t getpid(void);
int sched_yield(void);
ssize_t read(int fd, void *buf, size_t len);
int open(const char *path, int flags);
int close(int fd);
void *mmap(void *addr, size_t len, int prot, int flags, int fd, long pos);
int munmap(void *addr, size_t len);

/* FreeBSD's values (sys/mman.h, sys/fcntl.h). */
#define	O_RDONLY	0
#define	PROT_NONE	0
#define	PROT_READ	1
#define	PROT_WRITE	2
#define	PROT_EXEC	4
#define	MAP_PRIVATE	0x0002
#define	MAP_FIXED	0x0010
#define	MAP_ANON	0x1000
#define	MAP_FAILED	((void *)-1)

/* FreeBSD's struct thr_param (sys/thr.h), as thr_new(2) reads it. */
struct thr_param {
	void	(*start_func)(void *);
	void	*arg;
	char	*stack_base;
	size_t	stack_size;
	char	*tls_base;
	size_t	tls_size;
	long	*child_tid;
	long	*parent_tid;
	int	flags;
	void	*rtp;
	void	*spare[3];
};

int thr_new(struct thr_param *param, int param_size);
void thr_exit(long *state) __attribute__((noreturn));
long __ksim_syscall_number(long number);
/* A system call by number with two arguments (a kernel module's). */
long __ksim_syscall2(long number, long a0, long a1);

void *memset(void *dst, int c, size_t len);
void *memcpy(void *dst, const void *src, size_t len);
size_t strlen(const char *s);

/* Writes a string, or a number in decimal, to standard output. */
void put_str(const char *s);
void put_u64(uint64_t v);

/* argv[i] as a decimal number, or def when absent or not a number. */
uint64_t arg_u64(int argc, char **argv, int i, uint64_t def);

/* A deterministic pseudo-random sequence (xorshift64). */
uint64_t rand_next(uint64_t *state);

int main(int argc, char **argv);

#endif
