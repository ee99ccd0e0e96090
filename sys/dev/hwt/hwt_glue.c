/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * hwt(4): the part of the framework that has to be C, the module
 * declaration (a linker-set entry made by kernel macros).  Everything
 * else is in the Rust archive (sys/modules/hwt/hwt_kmod.rs), entered
 * through hwt_rs_modevent(); trace backends register through the
 * archive's hwt_rs_backend_register(), which the module exports.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>

#include "kpi_glue.h"

/* In the Rust archive. */
int	hwt_rs_modevent(struct module *module, int cmd, void *arg);

static int
hwt_modevent(struct module *module, int cmd, void *arg)
{
	int error;

	error = hwt_rs_modevent(module, cmd, arg);
	/*
	 * The devices the framework destroyed are destroyed from a task
	 * (destroy_dev_sched): wait for them before the code goes, at
	 * unload and after a failed load, which the kernel unloads too.
	 */
	if ((cmd == MOD_UNLOAD && error == 0) ||
	    (cmd == MOD_LOAD && error != 0))
		kpi_cdev_drain();
	return (error);
}

static moduledata_t hwt_mod = {
	.name =		"hwt",
	.evhand =	hwt_modevent,
	.priv =		NULL,
};

DECLARE_MODULE(hwt, hwt_mod, SI_SUB_DRIVERS, SI_ORDER_FIRST);
MODULE_VERSION(hwt, 1);
