/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The part of kpi's FreeBSD glue that only the Intel PT backend uses:
 * XSAVES and XRSTORS of the PT state component on the current CPU.
 * Linked into pt.ko (and `device intel_pt') beside kpi_glue.c.
 *
 * Each CPU has two save areas, allocated when the module is loaded (the
 * calls run in critical sections and NMI handlers, where nothing may be
 * allocated): one for thread context and one for kpi's NMI handlers, as
 * an NMI may come while the thread-context call uses its area.  An area is in the compacted format with the PT
 * component alone: the 512-byte legacy region (untouched: x87 and SSE
 * are never in the request), the 64-byte XSAVE header, then the
 * component, whose size and alignment CPUID leaf 0xd, sub-leaf 8
 * reports.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/malloc.h>
#include <sys/pcpu.h>
#include <sys/pmckern.h>
#include <sys/smp.h>

#include <machine/cpufunc.h>
#include <machine/md_var.h>
#include <machine/specialreg.h>

#include "kpi_glue.h"

/* The legacy region, then the header. */
#define	KPI_XSAVE_HDR_OFFSET	512
#define	KPI_XSAVE_HDR_SIZE	64
/* XCOMP_BV bit 63: the area is in the compacted format. */
#define	KPI_XCOMP_BV_COMPACT	(1ULL << 63)
/* CPUID.(EAX=0dh,ECX=i):ECX bit 1: the component is 64-byte aligned. */
#define	KPI_XSAVE_ALIGNED	0x2
/* The x87 and SSE bits XCR0 must have (XSAVES requires x87). */
#define	KPI_XCR0_BASE		(XFEATURE_ENABLED_X87 | XFEATURE_ENABLED_SSE)

static uint8_t *kpi_pt_areas;		/* 2 * (mp_maxid + 1) areas */
static size_t kpi_pt_stride;		/* bytes per CPU, a multiple of 64 */
static size_t kpi_pt_offset;		/* the component in an area */

static void
kpi_pt_areas_init(void *arg __unused)
{
	u_int regs[4];
	size_t size;

	if ((cpu_feature2 & CPUID2_XSAVE) == 0)
		return;
	cpuid_count(0xd, 8, regs);
	size = regs[0];
	if (size < KPI_PT_STATE_WORDS * sizeof(uint64_t))
		return;
	kpi_pt_offset = KPI_XSAVE_HDR_OFFSET + KPI_XSAVE_HDR_SIZE;
	if ((regs[2] & KPI_XSAVE_ALIGNED) != 0)
		kpi_pt_offset = roundup2(kpi_pt_offset, 64);
	kpi_pt_stride = roundup2(kpi_pt_offset + size, 64);
	kpi_pt_areas = malloc_aligned(kpi_pt_stride * 2 * (mp_maxid + 1), 64,
	    M_PMC, M_WAITOK | M_ZERO);
}
SYSINIT(kpi_pt_areas, SI_SUB_KLD, SI_ORDER_ANY, kpi_pt_areas_init, NULL);

static void
kpi_pt_areas_fini(void *arg __unused)
{
	free(kpi_pt_areas, M_PMC);
	kpi_pt_areas = NULL;
}
SYSUNINIT(kpi_pt_areas, SI_SUB_KLD, SI_ORDER_ANY, kpi_pt_areas_fini, NULL);

/*
 * XSAVES (save) or XRSTORS of the PT component through this CPU's area,
 * with what the instructions need for the moment: CR4.OSXSAVE (left set,
 * as FreeBSD's pt.c leaves it), CR0.TS clear, x87 and SSE in XCR0, and
 * the PT bit in IA32_XSS; the rest is put back afterwards.
 */
static void
kpi_pt_xsave(uint64_t *state, bool save)
{
	uint64_t *hdr, *comp;
	uint8_t *area;
	u_long cr0, xcr0;
	uint64_t xss;
	int i;

	if (kpi_pt_areas == NULL)
		panic("kpi: XSAVES of the PT state without a save area");
	area = kpi_pt_areas + kpi_pt_stride * (2 * curcpu + kpi_in_nmi());
	hdr = (uint64_t *)(area + KPI_XSAVE_HDR_OFFSET);
	comp = (uint64_t *)(area + kpi_pt_offset);

	if ((rcr4() & CR4_XSAVE) == 0)
		load_cr4(rcr4() | CR4_XSAVE);
	cr0 = rcr0();
	if ((cr0 & CR0_TS) != 0)
		clts();
	xcr0 = rxcr(XCR0);
	if ((xcr0 & KPI_XCR0_BASE) != KPI_XCR0_BASE)
		load_xcr(XCR0, xcr0 | KPI_XCR0_BASE);
	xss = rdmsr(MSR_IA32_XSS);
	wrmsr(MSR_IA32_XSS, xss | XFEATURE_ENABLED_PT);

	if (save) {
		xsaves(area, XFEATURE_ENABLED_PT);
		/* A component in its initial state is not written: zeros. */
		for (i = 0; i < KPI_PT_STATE_WORDS; i++)
			state[i] = (hdr[0] & XFEATURE_ENABLED_PT) != 0 ?
			    comp[i] : 0;
	} else {
		for (i = 0; i < KPI_XSAVE_HDR_SIZE / 8; i++)
			hdr[i] = 0;
		hdr[0] = XFEATURE_ENABLED_PT;
		hdr[1] = XFEATURE_ENABLED_PT | KPI_XCOMP_BV_COMPACT;
		for (i = 0; i < KPI_PT_STATE_WORDS; i++)
			comp[i] = state[i];
		xrstors(area, XFEATURE_ENABLED_PT);
	}

	wrmsr(MSR_IA32_XSS, xss);
	if ((xcr0 & KPI_XCR0_BASE) != KPI_XCR0_BASE)
		load_xcr(XCR0, xcr0);
	if ((cr0 & CR0_TS) != 0)
		load_cr0(cr0);
}

void
kpi_xsaves_pt(uint64_t *state)
{
	kpi_pt_xsave(state, true);
}

void
kpi_xrstors_pt(const uint64_t *state)
{
	kpi_pt_xsave(__DECONST(uint64_t *, state), false);
}
