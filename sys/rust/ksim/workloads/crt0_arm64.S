/*
 * The workloads' process entry on arm64.  The kernel starts a program
 * with x0 pointing at argc, followed by argv[], a NULL, envp[], a NULL
 * and the auxiliary vector.  _start makes an outermost frame (zero frame
 * pointer and link register, where call-chain walks stop) and calls
 * __ksim_start(sp); its value is the exit status.
 */
	.text
	.globl	_start
	.type	_start,@function
_start:
	mov	x29, #0
	mov	x30, #0
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	__ksim_start
	bl	_exit
	udf	#0
	.size	_start, . - _start

	.section .note.GNU-stack,"",@progbits
