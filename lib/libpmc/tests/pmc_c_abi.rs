//! The pmc(3) C entry points, called as a C program calls them, on the
//! simulator transport the environment selects. One test: the library's
//! connection is process-wide.

use core::ffi::{CStr, c_char, c_int};

use ::pmc::*;
use uapi::pmc::*;

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

#[test]
fn the_c_api_on_the_simulator() {
    // Before pmc_init nothing reaches a driver.
    assert_eq!(pmc_ncpu(), -1);
    assert_eq!(errno(), libc::ENXIO);
    assert_eq!(pmc_start(1), -1);
    assert_eq!(errno(), libc::ENXIO);
    // The static tables need no pmc_init, as in FreeBSD's library; the
    // software events are only known after it.
    {
        let mut names: *mut *const c_char = core::ptr::null_mut();
        let mut n = 0;
        // SAFETY: writable out-pointers.
        let r = unsafe { pmc_event_names_of_class(PmcClass::Tsc.raw(), &mut names, &mut n) };
        assert_eq!(r, 0);
        // SAFETY: `n` valid names, the array malloc(3)ed for us.
        unsafe {
            assert_eq!((n, CStr::from_ptr(*names).to_str()), (1, Ok("cycles")));
            libc::free(names.cast());
        }
        // SAFETY: as above.
        let r = unsafe { pmc_event_names_of_class(PmcClass::Soft.raw(), &mut names, &mut n) };
        assert_eq!(r, 0);
        assert_eq!(n, 0);
        // SAFETY: malloc(3)ed even when empty.
        unsafe { libc::free(names.cast()) };
    }

    // SAFETY: this binary's only test runs alone, before any other
    // thread reads the environment.
    unsafe {
        std::env::set_var("LIBPMC_TRANSPORT", "sim");
        std::env::set_var("LIBPMC_SIM_CPUS", "4");
    }
    assert_eq!(pmc_init(), 0);
    assert_eq!(pmc_init(), 0, "a second pmc_init is a no-op");
    assert_eq!(pmc_ncpu(), 4);
    assert!(pmc_npmc(0) >= 2);
    assert_eq!(pmc_npmc(4), -1);
    assert_eq!(errno(), libc::EINVAL);

    let mut id: PmcId = 0;
    let mut value: PmcValue = 0;
    // SAFETY: valid NUL-terminated specs and writable out-parameters.
    unsafe {
        assert_eq!(
            pmc_allocate(
                c"SOFT-CLOCK.HARD".as_ptr(),
                PmcMode::Tc.raw(),
                0,
                PMC_CPU_ANY as c_int,
                &mut id,
                0
            ),
            0
        );
        assert_eq!(pmc_attach(id, 0), 0);
        assert_eq!(pmc_start(id), 0);
        library_handle()
            .unwrap()
            .transport()
            .simulator()
            .unwrap()
            .advance(12);
        assert_eq!(pmc_read(id, &mut value), 0);
        assert_eq!(value, 12);
        let mut caps = 0;
        assert_eq!(pmc_capabilities(id, &mut caps), 0);
        assert_ne!(caps & PmcCaps::READ.bits(), 0);
        assert_eq!(pmc_stop(id), 0);
        assert_eq!(pmc_rw(id, 5, &mut value), 0);
        assert_eq!(value, 12);
        assert_eq!(pmc_read(id, core::ptr::null_mut()), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(pmc_release(id), 0);

        // A NULL result pointer fails before anything is done: no PMC is
        // left allocated, no value written.
        let owned_rows = || {
            let mut info: *mut PmcOpGetpmcinfo = core::ptr::null_mut();
            assert_eq!(pmc_pmcinfo(0, &mut info), 0);
            let rows = core::slice::from_raw_parts((*info).pm_pmcs.as_ptr(), pmc_npmc(0) as usize);
            let n = rows
                .iter()
                .filter(|r| r.pm_rowdisp != PmcDisp::Free.raw())
                .count();
            libc::free(info.cast());
            n
        };
        let before = owned_rows();
        assert_eq!(
            pmc_allocate(
                c"SOFT-CLOCK.HARD".as_ptr(),
                PmcMode::Sc.raw(),
                0,
                0,
                core::ptr::null_mut(),
                0
            ),
            -1
        );
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(owned_rows(), before, "nothing was allocated");

        // Errors: an unknown event allocates nothing; a bad mode.
        let mut other: PmcId = 0;
        assert_eq!(
            pmc_allocate(
                c"NO-SUCH-EVENT".as_ptr(),
                PmcMode::Tc.raw(),
                0,
                -1,
                &mut other,
                0
            ),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(other, 0);
        assert_eq!(pmc_allocate(c"TSC".as_ptr(), 42, 0, 0, &mut other, 0), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            pmc_allocate(c"TSC".as_ptr(), PmcMode::Sc.raw(), 0, 99, &mut other, 0),
            -1
        );
        assert_eq!(errno(), libc::EINVAL, "no CPU 99");
        // The driver said why, as uexterr_gettext(3) gives it on FreeBSD.
        let mut text = [0 as c_char; 256];
        assert_eq!(uexterr::uexterr_gettext(text.as_mut_ptr(), text.len()), 0);
        assert_eq!(CStr::from_ptr(text.as_ptr()), c"Invalid PMC CPU");
        // Cut as strlcpy(3) cuts, NUL included; NULL is refused.
        assert_eq!(uexterr::uexterr_gettext(text.as_mut_ptr(), 8), 0);
        assert_eq!(CStr::from_ptr(text.as_ptr()), c"Invalid");
        assert_eq!(uexterr::uexterr_gettext(core::ptr::null_mut(), 8), -1);
        assert_eq!(errno(), libc::EFAULT);
        // A failure before any request (a bad mode, refused by the
        // library) leaves it as it was.
        assert_eq!(pmc_allocate(c"TSC".as_ptr(), 42, 0, 0, &mut other, 0), -1);
        assert_eq!(uexterr::uexterr_gettext(text.as_mut_ptr(), text.len()), 0);
        assert_eq!(CStr::from_ptr(text.as_ptr()), c"Invalid PMC CPU");
        // Another thread has its own: none.
        std::thread::spawn(|| {
            let mut text = [1 as c_char; 16];
            assert_eq!(uexterr::uexterr_gettext(text.as_mut_ptr(), text.len()), 0);
            assert_eq!(CStr::from_ptr(text.as_ptr()), c"");
        })
        .join()
        .unwrap();

        // The row table, malloc(3)ed for the caller.
        let mut info: *mut PmcOpGetpmcinfo = core::ptr::null_mut();
        assert_eq!(pmc_pmcinfo(1, &mut info), 0);
        assert_eq!((*info).pm_cpu, 1);
        let rows = core::slice::from_raw_parts((*info).pm_pmcs.as_ptr(), pmc_npmc(1) as usize);
        assert!(rows.iter().any(|r| r.pm_class == PmcClass::Tsc.raw()));
        libc::free(info.cast());

        // Event names of a class.
        let mut names: *mut *const c_char = core::ptr::null_mut();
        let mut n = 0;
        assert_eq!(
            pmc_event_names_of_class(PmcClass::Soft.raw(), &mut names, &mut n),
            0
        );
        let names_vec: Vec<&str> = (0..n as usize)
            .map(|i| CStr::from_ptr(*names.add(i)).to_str().unwrap())
            .collect();
        assert!(names_vec.contains(&"CLOCK.HARD"), "{names_vec:?}");
        libc::free(names.cast());
        // A class with a table in libpmc, offered by the machine or not:
        // the table, as FreeBSD's gives it.
        assert_eq!(
            pmc_event_names_of_class(PmcClass::Iaf.raw(), &mut names, &mut n),
            0
        );
        let iaf: Vec<&str> = (0..n as usize)
            .map(|i| CStr::from_ptr(*names.add(i)).to_str().unwrap())
            .collect();
        assert_eq!(
            iaf,
            [
                "INSTR_RETIRED_ANY",
                "CPU_CLK_UNHALTED_CORE",
                "CPU_CLK_UNHALTED_REF"
            ]
        );
        libc::free(names.cast());
        // One without: the Intel programmable counters' events are the
        // PMU tables'.
        assert_eq!(
            pmc_event_names_of_class(PmcClass::Iap.raw(), &mut names, &mut n),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);

        let mut ci: *const PmcOpGetcpuinfo = core::ptr::null();
        assert_eq!(pmc_cpuinfo(&mut ci), 0);
        assert_eq!((*ci).pm_ncpu, 4);
    }

    // The name functions.
    let name = |p: *const c_char| {
        assert!(!p.is_null());
        // SAFETY: the library returns NUL-terminated strings that live as
        // long as the program.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
    };
    assert_eq!(name(pmc_name_of_class(PmcClass::Soft.raw())), "SOFT");
    assert_eq!(name(pmc_name_of_mode(PmcMode::Ts.raw())), "TS");
    assert_eq!(name(pmc_name_of_state(PmcState::Running.raw())), "RUNNING");
    assert_eq!(name(pmc_name_of_disposition(PmcDisp::Free.raw())), "FREE");
    // A failed PMU allocation resets the event, the capabilities and the
    // class, and zeroes the machine-dependent part, as FreeBSD's does.
    let mut pm = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    pm.pm_ev = 7;
    pm.pm_class = PmcClass::Iap.raw();
    pm.pm_caps = PmcCaps::INTERRUPT.bits();
    pm.pm_flags = PmcFlags::CALLCHAIN.bits();
    // SAFETY: a C string and a writable request.
    let r = unsafe { pmc_pmu_pmcallocate(c"no_such_event".as_ptr(), &mut pm) };
    assert_eq!(r, libc::ENOENT);
    assert_eq!((pm.pm_ev, pm.pm_class, pm.pm_caps), (0, 0, 0));
    assert_eq!(pm.pm_flags, PmcFlags::CALLCHAIN.bits(), "the rest is left");
    // Past PMC_DISP_LAST and PMC_STATE_LAST: no name, as in FreeBSD's.
    assert!(pmc_name_of_disposition(PmcDisp::Unknown.raw()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(pmc_name_of_state(PmcState::Max.raw()).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(
        name(pmc_name_of_capability(PmcCaps::INTERRUPT.bits())),
        "INTERRUPT"
    );
    // libpmc's tables: the TSC's one entry is "cycles"; an IAF code has
    // no name there.
    assert_eq!(name(pmc_name_of_event(0x1000)), "cycles");
    assert!(pmc_name_of_event(0x10000).is_null());
    assert_eq!(errno(), libc::EINVAL);
    let hard = library_handle()
        .unwrap()
        .events_of_class(PmcClass::Soft)
        .unwrap()
        .iter()
        .find(|e| e.name.to_bytes() == b"CLOCK.HARD")
        .unwrap()
        .code;
    assert_eq!(name(pmc_name_of_event(hard)), "CLOCK.HARD");
    assert!(pmc_name_of_class(0xEE).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(
        pmc_name_of_capability(PmcCaps::READ.bits() | PmcCaps::WRITE.bits()).is_null(),
        "one bit only"
    );
}
