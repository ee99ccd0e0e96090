/*
 * calls [rounds]: a small stack-machine interpreter.  Each instruction is
 * dispatched through a switch dense enough to become a jump table, and
 * arithmetic goes through a table of function pointers (indirect calls),
 * besides plain direct calls.  Prints the result; exits 0.
 */
#include "ksim_workload.h"

enum op {
	OP_PUSH, OP_ADD, OP_SUB, OP_MUL, OP_XOR, OP_DUP, OP_SWAP, OP_DROP,
	OP_JNZ, OP_DEC, OP_CALLF, OP_HALT
};

typedef uint64_t (*binop_fn)(uint64_t, uint64_t);

static uint64_t f_add(uint64_t a, uint64_t b) { return (a + b); }
static uint64_t f_mul(uint64_t a, uint64_t b) { return (a * b + 1); }
static uint64_t f_rot(uint64_t a, uint64_t b) { return ((a << 7) | (a >> 57)) ^ b; }
static uint64_t f_mix(uint64_t a, uint64_t b) { return (a ^ (b * 0x9e3779b9u)); }

/* Called through a pointer the optimizer cannot see through. */
static binop_fn volatile functions[4] = { f_add, f_mul, f_rot, f_mix };

struct insn {
	enum op op;
	long arg;
};

static __attribute__((noinline)) uint64_t
run(const struct insn *code, uint64_t counter)
{
	uint64_t stack[16];
	int sp = 0, pc = 0;

	stack[sp++] = counter;
	stack[sp++] = 1;
	for (;;) {
		const struct insn *i = &code[pc++];
		uint64_t a, b;

		switch (i->op) {
		case OP_PUSH:
			stack[sp++] = (uint64_t)i->arg;
			break;
		case OP_ADD:
			b = stack[--sp];
			stack[sp - 1] += b;
			break;
		case OP_SUB:
			b = stack[--sp];
			stack[sp - 1] -= b;
			break;
		case OP_MUL:
			b = stack[--sp];
			stack[sp - 1] *= b;
			break;
		case OP_XOR:
			b = stack[--sp];
			stack[sp - 1] ^= b;
			break;
		case OP_DUP:
			a = stack[sp - 1];
			stack[sp++] = a;
			break;
		case OP_SWAP:
			a = stack[sp - 1];
			stack[sp - 1] = stack[sp - 2];
			stack[sp - 2] = a;
			break;
		case OP_DROP:
			sp--;
			break;
		case OP_JNZ:
			if (stack[sp - 2] != 0)
				pc = (int)i->arg;
			break;
		case OP_DEC:
			stack[sp - 2]--;
			break;
		case OP_CALLF:
			b = stack[--sp];
			stack[sp - 1] = functions[i->arg & 3](stack[sp - 1], b);
			stack[sp++] = b;
			break;
		case OP_HALT:
			return (stack[sp - 1]);
		}
	}
}

/* counter acc -> loop: acc = f(acc, k) for each f; counter--. */
static const struct insn program[] = {
	{ OP_PUSH, 3 }, { OP_CALLF, 0 }, { OP_DROP, 0 },
	{ OP_PUSH, 5 }, { OP_CALLF, 1 }, { OP_DROP, 0 },
	{ OP_PUSH, 11 }, { OP_CALLF, 2 }, { OP_DROP, 0 },
	{ OP_PUSH, 13 }, { OP_CALLF, 3 }, { OP_DROP, 0 },
	{ OP_DUP, 0 }, { OP_PUSH, 2 }, { OP_MUL, 0 }, { OP_XOR, 0 },
	{ OP_PUSH, 1 }, { OP_ADD, 0 }, { OP_PUSH, 1 }, { OP_SUB, 0 },
	{ OP_SWAP, 0 }, { OP_SWAP, 0 },
	{ OP_DEC, 0 }, { OP_JNZ, 0 }, { OP_HALT, 0 },
};

int
main(int argc, char **argv)
{
	uint64_t rounds = arg_u64(argc, argv, 1, 2000);

	put_str("calls: ");
	put_u64(run(program, rounds));
	put_str("\n");
	return (0);
}
