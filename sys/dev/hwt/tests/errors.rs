//! hwt(4)'s ABI on the simulated machine: every errno and limit of
//! /dev/hwt's ALLOC and of a context's device.

// Host test code: the kernel crates' allocation lints (sys/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use hwt::{BackendOps, BufId, BufPtr};
use ksim::{CpuState, Cred, MachineConfig};
use uapi::hwt::*;

#[test]
fn dev_hwt_is_root_wheel_0660_and_takes_only_alloc() {
    let s = Sim::new();
    assert_eq!(s.m.dev_perms("/dev/hwt"), Some((0, 0, 0o660)));
    let user = s.spawn(Cred::user(1001), "user");
    assert_eq!(s.m.dev_open(user.tid, "/dev/hwt", true, true), Err(13));
    let root = s.root();
    let fd = s.open(root, "/dev/hwt");
    for cmd in [
        HWT_IOC_START,
        HWT_IOC_STOP,
        HWT_IOC_RECORD_GET,
        HWT_IOC_BUFPTR_GET,
        HWT_IOC_SET_CONFIG,
        HWT_IOC_WAKEUP,
        HWT_IOC_SVC_BUF,
    ] {
        let mut arg = vec![0u8; ((cmd >> 16) & 0x1fff) as usize];
        assert_eq!(
            s.ioctl_bytes(root, &fd, cmd, &mut arg),
            Err(ENXIO),
            "{cmd:#x}"
        );
    }
    // /dev/hwt cannot be mapped.
    assert_eq!(s.m.dev_mmap(root.tid, &fd, 0, 4096, 1).err(), Some(19));
    s.unload_clean();
}

#[test]
fn alloc_checks_the_buffer_size_and_backend_in_freebsds_order() {
    let s = Sim::new();
    let root = s.root();
    let target = s.root();
    let fd = s.open(root, "/dev/hwt");
    let base = AllocArgs::thread(target.pid);
    let cases: Vec<(AllocArgs, Errno)> = vec![
        (
            AllocArgs {
                bufsize: (32 << 30) + 4096,
                ..base.clone()
            },
            EINVAL,
        ),
        (
            AllocArgs {
                bufsize: 4096 + 1,
                ..base.clone()
            },
            EINVAL,
        ),
        (
            AllocArgs {
                backend: None,
                ..base.clone()
            },
            EINVAL,
        ),
        (
            AllocArgs {
                name_override: Some(0xdead_0000),
                ..base.clone()
            },
            EFAULT,
        ),
        (
            AllocArgs {
                backend: Some("pt"),
                ..base.clone()
            },
            ENODEV,
        ),
        (
            AllocArgs {
                mode: 3,
                ..base.clone()
            },
            ENXIO,
        ),
        (
            AllocArgs {
                mode: 0,
                ..base.clone()
            },
            ENXIO,
        ),
    ];
    for (args, want) in cases {
        assert_eq!(s.alloc_raw(root, &fd, &args), Err(want), "{args:?}");
    }
    // A backend name with no NUL in its 256 bytes.
    let long = s.m.user_alloc(root.pid, 300);
    s.m.user_write(root.pid, long, &[b'x'; 300]);
    let args = AllocArgs {
        name_override: Some(long),
        ..base.clone()
    };
    assert_eq!(s.alloc_raw(root, &fd, &args), Err(ENAMETOOLONG));
    // The exact maximum and 32 GiB itself pass the size checks (the
    // backend then runs out of nothing: 32 GiB is refused only by memory,
    // so use an absent backend to stop right after the checks).
    let args = AllocArgs {
        bufsize: 32 << 30,
        backend: Some("absent"),
        ..base
    };
    assert_eq!(s.alloc_raw(root, &fd, &args), Err(ENODEV));
    assert_eq!(s.module.as_ref().unwrap().contexts(), 0);
    s.unload_clean();
}

#[test]
fn thread_mode_checks_the_target() {
    let s = Sim::new();
    let owner = s.spawn(Cred::user(1001), "tool");
    let fd = s.open(s.root(), "/dev/hwt");
    // The owner's descriptor: devfs would refuse a user; root opened it
    // and passed it on (the check is at open).
    let mine = s.spawn(Cred::user(1001), "mine");
    let other = s.spawn(Cred::user(1002), "other");
    assert_eq!(
        s.alloc_raw(owner, &fd, &AllocArgs::thread(99_999)),
        Err(ENXIO),
        "no such process"
    );
    assert_eq!(
        s.alloc_raw(owner, &fd, &AllocArgs::thread(other.pid)),
        Err(EPERM),
        "another user's process"
    );
    // No privilege overrides the check: root may not trace a user's.
    let root = s.root();
    assert_eq!(
        s.alloc_raw(root, &fd, &AllocArgs::thread(mine.pid)),
        Err(EPERM)
    );
    // A set-gid target: its saved gid is not the owner's.
    let setgid = s.spawn(
        Cred {
            svgid: 5,
            ..Cred::user(1001)
        },
        "setgid",
    );
    assert_eq!(
        s.alloc_raw(owner, &fd, &AllocArgs::thread(setgid.pid)),
        Err(EPERM)
    );
    let ident = s
        .alloc_raw(owner, &fd, &AllocArgs::thread(mine.pid))
        .expect("own process");
    assert_eq!(ident, 0);
    assert_eq!(
        s.alloc_raw(owner, &fd, &AllocArgs::thread(mine.pid)),
        Err(EEXIST),
        "the owner has it"
    );
    let owner2 = s.spawn(Cred::user(1001), "tool2");
    assert_eq!(
        s.alloc_raw(owner2, &fd, &AllocArgs::thread(mine.pid)),
        Err(EEXIST),
        "another owner traces it"
    );
    // The failed ALLOCs gave their idents back: the next is 1.
    let third = s.spawn(Cred::user(1001), "third");
    assert_eq!(
        s.alloc_raw(owner2, &fd, &AllocArgs::thread(third.pid)),
        Ok(1)
    );
    // FreeBSD's owner finds its CPU-mode context under pid 0: a request
    // to trace process 0's threads is its second context for pid 0.
    let cpu_owner = s.root();
    let cfd = s.open(cpu_owner, "/dev/hwt");
    s.alloc_raw(cpu_owner, &cfd, &AllocArgs::cpu(&[0])).unwrap();
    assert_eq!(
        s.alloc_raw(cpu_owner, &cfd, &AllocArgs::thread(0)),
        Err(EEXIST),
        "a CPU-mode context is the owner's for pid 0"
    );
    s.unload_clean();
}

#[test]
fn the_ident_reaches_userland_first_and_a_bad_pointer_frees_it() {
    let s = Sim::new();
    let root = s.root();
    let fd = s.open(root, "/dev/hwt");
    let args = AllocArgs {
        ident_override: Some(0xdead_0000),
        ..AllocArgs::thread(root.pid)
    };
    assert_eq!(s.alloc_raw(root, &fd, &args), Err(EFAULT));
    // A missing target fails after the ident was written.
    let ident = s.user_int(root, -1);
    let args = AllocArgs {
        ident_override: Some(ident),
        ..AllocArgs::thread(77_777)
    };
    assert_eq!(s.alloc_raw(root, &fd, &args), Err(ENXIO));
    assert_eq!(
        s.read_int(root, ident),
        0,
        "ident copied out before the failure"
    );
    assert_eq!(s.alloc_raw(root, &fd, &AllocArgs::thread(root.pid)), Ok(0));
    s.unload_clean();
}

#[test]
fn the_ident_space_is_256_lowest_free_first() {
    let s = Sim::new();
    let fd = s.open(s.root(), "/dev/hwt");
    let mut owners = Vec::new();
    for i in 0..256 {
        let owner = s.root();
        let ident = s
            .alloc_raw(owner, &fd, &AllocArgs::thread(owner.pid))
            .unwrap();
        assert_eq!(ident, i);
        owners.push(owner);
    }
    let one_more = s.root();
    assert_eq!(
        s.alloc_raw(one_more, &fd, &AllocArgs::thread(one_more.pid)),
        Err(ENOMEM)
    );
    // The owner of ident 7 exits: 7 is the next.
    s.m.exit(owners[7].pid);
    assert_eq!(
        s.alloc_raw(one_more, &fd, &AllocArgs::thread(one_more.pid)),
        Ok(7)
    );
    s.unload_clean();
}

#[test]
fn cpu_mode_checks_the_set() {
    let cfg = MachineConfig {
        cpus: vec![
            CpuState::Online,
            CpuState::Online,
            CpuState::Disabled,
            CpuState::Online,
        ],
        ..MachineConfig::default()
    };
    let s = Sim::with(cfg, BackendOps::all());
    let root = s.root();
    let fd = s.open(root, "/dev/hwt");
    assert_eq!(s.alloc_raw(root, &fd, &AllocArgs::cpu(&[])), Err(ENODEV));
    assert_eq!(
        s.alloc_raw(root, &fd, &AllocArgs::cpu(&[0, 2])),
        Err(ENXIO),
        "halted"
    );
    assert_eq!(
        s.alloc_raw(root, &fd, &AllocArgs::cpu(&[9])),
        Err(ENXIO),
        "absent"
    );
    let args = AllocArgs {
        cpu_map_override: Some(0xdead_0000),
        ..AllocArgs::cpu(&[0])
    };
    assert_eq!(s.alloc_raw(root, &fd, &args), Err(EFAULT));
    // A set shorter than the kernel's is read as far as it goes; CPU 1
    // is in the first byte.
    let args = AllocArgs {
        cpusetsize: 1,
        ..AllocArgs::cpu(&[1])
    };
    let ident = s.alloc_raw(root, &fd, &args).unwrap();
    let devs = s.m.dev_names();
    assert!(devs.contains(&format!("hwt_{ident}_1")), "{devs:?}");
    assert!(!devs.contains(&format!("hwt_{ident}_0")), "{devs:?}");
    let ident2 = s.alloc_raw(root, &fd, &AllocArgs::cpu(&[0, 3])).unwrap();
    let devs = s.m.dev_names();
    for cpu in [0, 3] {
        assert!(devs.contains(&format!("hwt_{ident2}_{cpu}")), "{devs:?}");
    }
    assert_eq!(
        s.m.dev_perms(&format!("hwt_{ident2}_3")),
        Some((0, 0, 0o660))
    );
    s.unload_clean();
}

#[test]
fn a_contexts_device_answers_its_owner_only() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let path = format!("/dev/hwt_{ident}_{}", target.pid);
    // A process that owns nothing: ENXIO.
    let stranger = s.root();
    let sfd = s.open(stranger, &path);
    assert_eq!(s.simple(stranger, &sfd, HWT_IOC_START), Err(ENXIO));
    // Another owner: EPERM.
    let other = s.root();
    let other_target = s.root();
    s.alloc_thread(other, other_target.pid);
    let ofd = s.open(other, &path);
    assert_eq!(s.simple(other, &ofd, HWT_IOC_START), Err(EPERM));
    let fd = s.open(owner, &path);
    assert_eq!(s.simple(owner, &fd, HWT_IOC_START), Ok(()));
    s.unload_clean();
}

#[test]
fn start_stop_and_set_config_follow_the_state() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    assert_eq!(
        s.simple(owner, &fd, HWT_IOC_STOP),
        Err(ENXIO),
        "not running"
    );
    assert_eq!(s.set_config(owner, &fd, false, Some(&[1, 2, 3]), 7), Ok(()));
    assert_eq!(s.simple(owner, &fd, HWT_IOC_START), Ok(()));
    assert_eq!(s.simple(owner, &fd, HWT_IOC_START), Err(ENXIO), "running");
    assert_eq!(
        s.set_config(owner, &fd, false, Some(&[4]), 1),
        Err(ENXIO),
        "no configuration while running"
    );
    s.take_calls();
    assert_eq!(s.simple(owner, &fd, HWT_IOC_STOP), Ok(()));
    assert_eq!(s.take_calls(), vec![Call::Stop { ident }]);
    assert_eq!(s.simple(owner, &fd, HWT_IOC_STOP), Err(ENXIO));
    // Sizes: a page is the most; 0 keeps what was set.
    let page = vec![0xa5u8; 4096];
    assert_eq!(s.set_config(owner, &fd, false, Some(&page), 1), Ok(()));
    assert_eq!(
        s.set_config(owner, &fd, false, Some(&[0u8; 4097]), 1),
        Err(EFBIG)
    );
    assert_eq!(
        s.set_config_raw(owner, &fd, false, 0xdead_0000, 16, 1),
        Err(EFAULT)
    );
    assert_eq!(s.set_config(owner, &fd, false, None, 1), Ok(()));
    // The backend sees the last good blob when it programs the unit.
    assert_eq!(s.simple(owner, &fd, HWT_IOC_START), Ok(()));
    s.take_calls();
    s.m.switch_in(0, target.tid);
    let calls = s.take_calls();
    assert!(
        matches!(&calls[0], Call::Configure { config: Some(c), .. } if c == &page),
        "{calls:?}"
    );
    s.m.switch_out(0);
    // Unknown commands do nothing and succeed.
    let odd = uapi::ioccom::iow(b'B', 0x42, 16);
    assert_eq!(s.simple(owner, &fd, odd), Ok(()));
    s.unload_clean();
}

#[test]
fn stop_without_a_backend_stop_disables_the_cpus() {
    let s = Sim::with(
        MachineConfig::default(),
        BackendOps::all() - BackendOps::STOP - BackendOps::SMP,
    );
    let owner = s.root();
    let fd = s.open(owner, "/dev/hwt");
    let ident = s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[0, 1])).unwrap();
    let cfd = s.open(owner, &format!("/dev/hwt_{ident}_1"));
    s.take_calls();
    s.simple(owner, &cfd, HWT_IOC_START).unwrap();
    let calls = s.take_calls();
    let want: Vec<Call> = vec![
        Call::Configure {
            cpu: 0,
            buf: BufId::Cpu(0),
            curcpu: 0,
            config: None,
        },
        Call::Configure {
            cpu: 1,
            buf: BufId::Cpu(1),
            curcpu: 1,
            config: None,
        },
        Call::Enable { cpu: 0, curcpu: 0 },
        Call::Enable { cpu: 1, curcpu: 1 },
    ];
    assert_eq!(calls, want);
    s.simple(owner, &cfd, HWT_IOC_STOP).unwrap();
    assert_eq!(
        s.take_calls(),
        vec![
            Call::Disable { cpu: 0, curcpu: 0 },
            Call::Disable { cpu: 1, curcpu: 1 }
        ]
    );
    // WAKEUP is for thread mode.
    assert_eq!(s.simple(owner, &cfd, HWT_IOC_WAKEUP), Err(ENXIO));
    s.unload_clean();
}

#[test]
fn cpu_mode_start_with_smp_and_a_failing_configure() {
    let s = Sim::new();
    let owner = s.root();
    let fd = s.open(owner, "/dev/hwt");
    let ident = s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[1])).unwrap();
    let cfd = s.open(owner, &format!("/dev/hwt_{ident}_1"));
    *s.configure_result.lock().unwrap() = Err(EINVAL);
    s.take_calls();
    assert_eq!(s.simple(owner, &cfd, HWT_IOC_START), Err(EINVAL));
    // It stays stopped: STOP says so, and START can be tried again.
    assert_eq!(s.simple(owner, &cfd, HWT_IOC_STOP), Err(ENXIO));
    *s.configure_result.lock().unwrap() = Ok(());
    s.take_calls();
    assert_eq!(s.simple(owner, &cfd, HWT_IOC_START), Ok(()));
    assert_eq!(
        s.take_calls(),
        vec![
            Call::Configure {
                cpu: 1,
                buf: BufId::Cpu(1),
                curcpu: 1,
                config: None
            },
            Call::EnableSmp
        ]
    );
    s.unload_clean();
}

#[test]
fn record_get_batches_are_1_to_1024() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    assert_eq!(s.records(owner, &fd, 0, false), Err(ENXIO));
    assert_eq!(s.records(owner, &fd, -1, false), Err(ENXIO));
    assert_eq!(s.records(owner, &fd, 1025, false), Err(ENXIO));
    let first = s.records(owner, &fd, 1024, false).unwrap();
    assert_eq!(first.len(), 1, "the THREAD_CREATE of thread 0");
    assert_eq!(first[0].record_type, 4);
    assert_eq!(first[0].int0, 0);
    assert_eq!(s.records(owner, &fd, 1, false).unwrap(), vec![]);
    // A bad count pointer or records pointer is EFAULT.
    let mut arg = vec![0u8; 32];
    arg[8..16].copy_from_slice(&0xdead_0000u64.to_ne_bytes());
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_RECORD_GET, &mut arg),
        Err(EFAULT)
    );
    s.m.mmap(target.pid, "/lib/libc.so.7", 0x8000_0000, 0x1000);
    let count = s.user_int(owner, 1);
    let mut arg = vec![0u8; 32];
    arg[0..8].copy_from_slice(&0xdead_0000u64.to_ne_bytes());
    arg[8..16].copy_from_slice(&count.to_ne_bytes());
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_RECORD_GET, &mut arg),
        Err(EFAULT)
    );
    s.unload_clean();
}

#[test]
fn records_tell_exec_mmap_munmap_and_threads_in_order() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.m.exec(target.pid, "/usr/bin/true", None);
    s.m.mmap(target.pid, "/lib/libc.so.7", 0x8000_0000, 0x2000);
    s.m.munmap(target.pid, 0x8000_0000, 0x2000);
    let t2 = s.m.thread_create(target.pid);
    let recs = s.records(owner, &fd, 16, false).unwrap();
    let kinds: Vec<u32> = recs.iter().map(|r| r.record_type).collect();
    // THREAD_CREATE 0, EXECUTABLE, MMAP, MUNMAP, THREAD_CREATE 1.
    assert_eq!(kinds, vec![4, 2, 0, 1, 4]);
    assert_eq!(recs[1].path, "/usr/bin/true");
    assert_eq!((recs[1].addr, recs[1].baseaddr), (0, 0));
    assert_eq!(recs[2].path, "/lib/libc.so.7");
    assert_eq!(recs[2].addr, 0x8000_0000);
    assert_eq!(recs[3].addr, 0x8000_0000, "MUNMAP keeps its address");
    assert_eq!(recs[3].path, "");
    assert_eq!(recs[4].int0, 1);
    let devs = s.m.dev_names();
    assert!(
        devs.contains(&format!("hwt_{ident}_{}_1", target.pid)),
        "{devs:?}"
    );
    assert!(s.take_calls().contains(&Call::ThreadAlloc { thread_id: 1 }));
    // The new thread is traced once the context runs.
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    s.take_calls();
    s.m.switch_in(1, t2);
    s.m.switch_out(1);
    assert_eq!(
        s.take_calls(),
        vec![
            Call::Configure {
                cpu: 1,
                buf: BufId::Thread(1),
                curcpu: 1,
                config: None
            },
            Call::Enable { cpu: 1, curcpu: 1 },
            Call::Disable { cpu: 1, curcpu: 1 }
        ]
    );
    s.unload_clean();
}

/// The KERNEL records come first, one per object of the linker's list,
/// each put at the head of the queue as FreeBSD's
/// hwt_record_kernel_objects does: the last module first, the kernel
/// last.
#[test]
fn cpu_mode_records_the_kernel_objects_first() {
    let s = Sim::new();
    let owner = s.root();
    s.m.kld_load(
        owner.tid,
        "/boot/kernel/first.ko",
        0xffff_ffff_9000_0000,
        0x10000,
    );
    s.m.kld_load(
        owner.tid,
        "/boot/modules/second.ko",
        0xffff_ffff_9100_0000,
        0x8000,
    );
    let fd = s.open(owner, "/dev/hwt");
    let ident = s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[0])).unwrap();
    let cfd = s.open(owner, &format!("/dev/hwt_{ident}_0"));
    let recs = s.records(owner, &cfd, 64, false).unwrap();
    let linker: Vec<(String, u64)> = {
        let _e = s.m.enter();
        ksim::kern::kernel_objects()
            .iter()
            .map(|o| (o.path.clone(), o.start))
            .collect()
    };
    assert_eq!(linker.len(), 3, "the kernel and two modules: {linker:?}");
    assert!(linker[0].0.ends_with("/kernel"), "{linker:?}");
    assert!(recs.iter().all(|r| r.record_type == 3), "{recs:?}");
    let got: Vec<(String, u64)> = recs.iter().map(|r| (r.path.clone(), r.addr)).collect();
    let want: Vec<(String, u64)> = linker.into_iter().rev().collect();
    assert_eq!(got, want);
    assert!(recs.iter().all(|r| r.baseaddr == 0));
    s.unload_clean();
}

#[test]
fn bufptr_get_copies_what_the_backend_reports_to_each_pointer_given() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    *s.next_read.lock().unwrap() = Ok(BufPtr {
        ident: 3,
        offset: 0x123,
        data: 0xfeed,
    });
    let (id, off, data) = (
        s.user_int(owner, -1),
        s.m.user_alloc(owner.pid, 8),
        s.m.user_alloc(owner.pid, 8),
    );
    let mut arg = vec![0u8; 32];
    arg[0..8].copy_from_slice(&id.to_ne_bytes());
    arg[8..16].copy_from_slice(&off.to_ne_bytes());
    arg[16..24].copy_from_slice(&data.to_ne_bytes());
    s.take_calls();
    s.ioctl_bytes(owner, &fd, HWT_IOC_BUFPTR_GET, &mut arg)
        .unwrap();
    assert_eq!(
        s.take_calls(),
        vec![Call::Read {
            buf: BufId::Thread(0)
        }]
    );
    assert_eq!(s.read_int(owner, id), 3);
    let u64_at = |a| u64::from_ne_bytes(s.m.user_read(owner.pid, a, 8).try_into().unwrap());
    assert_eq!(u64_at(off), 0x123);
    assert_eq!(u64_at(data), 0xfeed);
    // Null pointers are skipped; a bad one is EFAULT.
    let mut arg = vec![0u8; 32];
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_BUFPTR_GET, &mut arg),
        Ok(())
    );
    arg[8..16].copy_from_slice(&0xdead_0000u64.to_ne_bytes());
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_BUFPTR_GET, &mut arg),
        Err(EFAULT)
    );
    // The backend's error comes back as it is.
    *s.next_read.lock().unwrap() = Err(ENOENT);
    let mut arg = vec![0u8; 32];
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_BUFPTR_GET, &mut arg),
        Err(ENOENT)
    );
    s.unload_clean();
}

#[test]
fn svc_buf_checks_state_and_size_and_needs_the_operation() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    let svc = |data: u64, size: usize, version: i32| {
        let mut arg = vec![0u8; 32];
        arg[0..8].copy_from_slice(&data.to_ne_bytes());
        arg[8..16].copy_from_slice(&(size as u64).to_ne_bytes());
        arg[16..20].copy_from_slice(&version.to_ne_bytes());
        s.ioctl_bytes(owner, &fd, HWT_IOC_SVC_BUF, &mut arg)
    };
    let buf = s.m.user_alloc(owner.pid, 8192);
    s.m.user_write(owner.pid, buf, &[7, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(svc(buf, 8, 1), Err(ENXIO), "stopped");
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    assert_eq!(svc(buf, 0, 1), Err(EINVAL));
    assert_eq!(svc(buf, 4097, 1), Err(EINVAL));
    assert_eq!(svc(0xdead_0000, 8, 1), Err(EFAULT));
    s.take_calls();
    assert_eq!(svc(buf, 8, 1), Ok(()));
    assert_eq!(
        s.take_calls(),
        vec![Call::SvcBuf {
            data: vec![7, 0, 0, 0, 1, 0, 0, 0],
            version: 1
        }]
    );
    assert_eq!(svc(buf, 4096, 2).map(|_| ()), Ok(()));
    s.unload_clean();

    // A backend without svc_buf (as PT): EOPNOTSUPP, not a crash.
    let s = Sim::with(MachineConfig::default(), BackendOps::STOP);
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    let buf = s.m.user_alloc(owner.pid, 8);
    let mut arg = vec![0u8; 32];
    arg[0..8].copy_from_slice(&buf.to_ne_bytes());
    arg[8..16].copy_from_slice(&8u64.to_ne_bytes());
    assert_eq!(
        s.ioctl_bytes(owner, &fd, HWT_IOC_SVC_BUF, &mut arg),
        Err(EOPNOTSUPP)
    );
    s.unload_clean();
}

#[test]
fn the_buffer_maps_read_only_at_offset_zero() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let path = format!("/dev/hwt_{ident}_{}", target.pid);
    let fd = s.open(owner, &path);
    let map = s.m.dev_mmap(owner.tid, &fd, 0, 4 * 4096, 1).unwrap();
    assert_eq!(map.len(), 4 * 4096);
    let mut b = vec![0xffu8; 4 * 4096];
    map.read(0, &mut b);
    assert!(b.iter().all(|&x| x == 0), "zeroed pages");
    assert_eq!(s.m.dev_mmap(owner.tid, &fd, 4096, 4096, 1).err(), Some(6));
    assert_eq!(s.m.dev_mmap(owner.tid, &fd, 0, 4096, 3).err(), Some(6));
    let ro = s.m.dev_open(owner.tid, &path, true, false).unwrap();
    assert_eq!(s.m.dev_mmap(owner.tid, &ro, 0, 4096, 3).err(), Some(13));
    drop(map);
    s.unload_clean();
}
