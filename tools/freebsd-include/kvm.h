/*
 * kvm(3), as much as FreeBSD's pmc tools declare of it: for compiling them
 * where the FreeBSD headers at hand lack <kvm.h> (tools/c-compat,
 * tools/world-check).  The signatures are those of the manual page.
 */
#ifndef _KVM_H_
#define	_KVM_H_
#include <sys/types.h>
typedef struct __kvm kvm_t;
struct kinfo_proc;
kvm_t	*kvm_openfiles(const char *, const char *, const char *, int, char *);
struct kinfo_proc *kvm_getprocs(kvm_t *, int, int, int *);
char	*kvm_geterr(kvm_t *);
int	kvm_close(kvm_t *);
#endif
