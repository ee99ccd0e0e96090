/*
 * The workloads' process entry on amd64.  The kernel starts a program
 * with %rdi pointing at argc, followed by argv[], a NULL, envp[], a NULL
 * and the auxiliary vector (FreeBSD's exec_setregs).  _start makes an
 * outermost frame (a zero return address and frame pointer, where
 * call-chain walks stop) and calls __ksim_start(sp); its value is the
 * exit status.
 */
	.text
	.globl	_start
	.type	_start,@function
_start:
	xorl	%ebp, %ebp
	pushq	%rbp
	movq	%rsp, %rbp
	andq	$-16, %rsp
	call	__ksim_start
	movl	%eax, %edi
	call	_exit
	ud2
	.size	_start, . - _start

	.section .note.GNU-stack,"",@progbits
