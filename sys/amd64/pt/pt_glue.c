/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * pt(4), the Intel Processor Trace backend of hwt(4): the part that has
 * to be C, the module declaration (linker-set entries made by kernel
 * macros).  The backend is the Rust archive (sys/modules/pt/pt_kmod.rs),
 * entered through pt_rs_modevent(); it registers with hwt.ko through the
 * entry points hwt.ko exports, hence the dependency.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>

/* In the Rust archive. */
int	pt_rs_modevent(struct module *module, int cmd, void *arg);

static int
pt_modevent(struct module *module, int cmd, void *arg)
{
	return (pt_rs_modevent(module, cmd, arg));
}

/*
 * SI_ORDER_MIDDLE, after hwt's SI_ORDER_FIRST: in a kernel with both
 * built in, MODULE_DEPEND does not order the module handlers, and the
 * backend registers with a loaded framework only.
 */
static moduledata_t pt_mod = {
	.name =		"intel_pt",
	.evhand =	pt_modevent,
	.priv =		NULL,
};

DECLARE_MODULE(intel_pt, pt_mod, SI_SUB_DRIVERS, SI_ORDER_MIDDLE);
MODULE_DEPEND(intel_pt, hwt, 1, 1, 1);
MODULE_VERSION(intel_pt, 1);
