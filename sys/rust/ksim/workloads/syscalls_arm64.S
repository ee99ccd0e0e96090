/*
 * FreeBSD system call stubs for arm64: the number in x8, the arguments in
 * x0-x5, `svc #0`.  On failure the kernel sets the carry flag and leaves
 * the errno value in x0; the stub stores it in errno and returns -1.
 */
	.text

#define	SYSCALL(name, number)		\
	.globl	name;			\
	.type	name,@function;		\
name:					\
	mov	x8, number;		\
	svc	#0;			\
	b.cs	__ksim_syscall_error;	\
	ret;				\
	.size	name, . - name

#include "syscall_list.h"

/* A system call by number, without arguments: for numbers the kernel
 * does not implement. */
	.globl	__ksim_syscall_number
	.type	__ksim_syscall_number,@function
__ksim_syscall_number:
	mov	x8, x0
	svc	#0
	b.cs	__ksim_syscall_error
	ret
	.size	__ksim_syscall_number, . - __ksim_syscall_number

/* A system call by number with two arguments. */
	.globl	__ksim_syscall2
	.type	__ksim_syscall2,@function
__ksim_syscall2:
	mov	x8, x0
	mov	x0, x1
	mov	x1, x2
	svc	#0
	b.cs	__ksim_syscall_error
	ret
	.size	__ksim_syscall2, . - __ksim_syscall2

	.globl	__ksim_syscall_error
	.type	__ksim_syscall_error,@function
__ksim_syscall_error:
	adrp	x1, errno
	str	w0, [x1, :lo12:errno]
	mov	x0, #-1
	ret
	.size	__ksim_syscall_error, . - __ksim_syscall_error

	.section .note.GNU-stack,"",@progbits
