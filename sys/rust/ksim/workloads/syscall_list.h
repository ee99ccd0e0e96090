/*
 * The system calls the workloads' stubs make, with FreeBSD's numbers
 * (sys/kern/syscalls.master); each syscalls_<arch>.S defines SYSCALL.
 */
SYSCALL(_exit, 1)
SYSCALL(write, 4)
SYSCALL(getpid, 20)
SYSCALL(sched_yield, 331)
SYSCALL(read, 3)
SYSCALL(open, 5)
SYSCALL(close, 6)
SYSCALL(munmap, 73)
SYSCALL(thr_exit, 431)
SYSCALL(thr_new, 455)
SYSCALL(mmap, 477)
