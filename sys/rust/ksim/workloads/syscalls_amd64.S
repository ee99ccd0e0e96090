/*
 * FreeBSD system call stubs for amd64: the number in %rax, the arguments
 * in %rdi, %rsi, %rdx, %r10, %r8, %r9 (%r10 for the fourth, since
 * `syscall` overwrites %rcx).  On failure the kernel sets the carry flag
 * and leaves the errno value in %rax; the stub stores it in errno and
 * returns -1.
 */
	.text

#define	SYSCALL(name, number)		\
	.globl	name;			\
	.type	name,@function;		\
name:					\
	movq	%rcx, %r10;		\
	movl	$number, %eax;		\
	syscall;			\
	jb	__ksim_syscall_error;	\
	ret;				\
	.size	name, . - name

#include "syscall_list.h"

/* A system call by number, without arguments: for numbers the kernel
 * does not implement. */
	.globl	__ksim_syscall_number
	.type	__ksim_syscall_number,@function
__ksim_syscall_number:
	movq	%rdi, %rax
	syscall
	jb	__ksim_syscall_error
	ret
	.size	__ksim_syscall_number, . - __ksim_syscall_number

/* A system call by number with two arguments. */
	.globl	__ksim_syscall2
	.type	__ksim_syscall2,@function
__ksim_syscall2:
	movq	%rdi, %rax
	movq	%rsi, %rdi
	movq	%rdx, %rsi
	syscall
	jb	__ksim_syscall_error
	ret
	.size	__ksim_syscall2, . - __ksim_syscall2

	.globl	__ksim_syscall_error
	.type	__ksim_syscall_error,@function
__ksim_syscall_error:
	movl	%eax, errno(%rip)
	movq	$-1, %rax
	ret
	.size	__ksim_syscall_error, . - __ksim_syscall_error

	.section .note.GNU-stack,"",@progbits
