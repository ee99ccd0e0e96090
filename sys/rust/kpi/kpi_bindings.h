/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * What bindgen declares to kpi's FreeBSD backend: the glue's functions
 * and the kernel lock structures whose size the lock storage takes.
 */
#include <sys/param.h>
#include <sys/systm.h>
#include <sys/lock.h>
#include <sys/mutex.h>
#include <sys/sx.h>

#include "kpi_glue.h"
