//! The recorder's parsing, on real data and synthetic launch parameters (no GPU needed).

use std::ffi::c_void;

use kreplay_cuda::callbacks::cbid as launch_cbid;
use kreplay_cuda::cupti::sys as csys;
use kreplay_format::cubin;
use kreplay_format::{Capture, LaunchApi};
use kreplay_record::launch::{argument_bytes, decode};

fn real_cubin(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../testdata/captures/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).expect("capture");
    let cap = Capture::parse(&bytes).expect("parse");
    cap.modules[0].image.clone()
}

#[test]
fn cubin_symbols_of_a_real_h200_module() {
    let syms = cubin::symbols(&real_cubin("cuda-saxpy")).expect("ELF");
    for k in [
        "_Z5saxpyifPKfPf",
        "_Z12poly_globalsiPKfPf",
        "_Z10gather_sum5Batch",
    ] {
        assert!(
            syms.functions.iter().any(|f| f == k),
            "{k} in {:?}",
            syms.functions
        );
    }
    let size = |n: &str| syms.objects.iter().find(|o| o.0 == n).map(|o| o.1);
    assert_eq!(size("coef"), Some(16));
    assert_eq!(size("hits"), Some(8));
    assert_eq!(size("bias"), Some(4));
    assert_eq!(syms.arch, Some(90));
    assert!(cubin::symbols(b"not an elf").is_none());
}

#[test]
fn decodes_cu_launch_kernel_and_flattens_kernel_params() {
    let mut n: i32 = 512;
    let mut a: f32 = 2.0;
    let mut x: u64 = 0x7f00_0000_0000;
    let mut y: u64 = 0x7f00_0010_0000;
    let mut params: [*mut c_void; 4] = [
        &mut n as *mut i32 as *mut c_void,
        &mut a as *mut f32 as *mut c_void,
        &mut x as *mut u64 as *mut c_void,
        &mut y as *mut u64 as *mut c_void,
    ];
    let p = csys::cuLaunchKernel_params {
        f: std::ptr::null_mut(),
        gridDimX: 16,
        gridDimY: 2,
        gridDimZ: 1,
        blockDimX: 256,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 1024,
        hStream: std::ptr::null_mut(),
        kernelParams: params.as_mut_ptr(),
        extra: std::ptr::null_mut(),
    };
    // SAFETY: `p` is a cuLaunchKernel parameter block, as CUPTI would pass it.
    let view = unsafe { decode(launch_cbid::LAUNCH_KERNEL, &p as *const _ as *const c_void) }
        .expect("decoded");
    assert_eq!(view.api, LaunchApi::LaunchKernel);
    assert_eq!(view.grid, [16, 2, 1]);
    assert_eq!(view.shared_bytes, 1024);
    assert!(view.stream.is_null(), "legacy stream stays null");
    let layout = [(0, 4), (4, 4), (8, 8), (16, 8)];
    // SAFETY: the view's kernelParams point at live values of the layout's sizes.
    let bytes = unsafe { argument_bytes(&view, &layout) }.expect("args");
    assert_eq!(bytes.len(), 24);
    assert_eq!(&bytes[0..4], &512i32.to_le_bytes());
    assert_eq!(&bytes[4..8], &2.0f32.to_le_bytes());
    assert_eq!(&bytes[8..16], &x.to_le_bytes());
    assert_eq!(&bytes[16..24], &y.to_le_bytes());

    // The per-thread-default-stream variant maps a null stream to CU_STREAM_PER_THREAD.
    // SAFETY: same layout for the _ptsz variant.
    let view = unsafe {
        decode(
            launch_cbid::LAUNCH_KERNEL_PTSZ,
            &p as *const _ as *const c_void,
        )
    }
    .expect("decoded");
    assert_eq!(view.stream as usize, 2);
}

#[test]
fn flattens_an_extra_parameter_buffer() {
    #[repr(C, packed)]
    struct Args {
        y: u64,
        x: u64,
        a: f32,
        b: f32,
        n: i32,
    }
    let mut args = Args {
        y: 0x1000,
        x: 0x2000,
        a: 3.0,
        b: 0.5,
        n: 7,
    };
    let mut size: usize = std::mem::size_of::<Args>();
    let mut extra: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(1), // CU_LAUNCH_PARAM_BUFFER_POINTER
        &mut args as *mut Args as *mut c_void,
        std::ptr::without_provenance_mut(2), // CU_LAUNCH_PARAM_BUFFER_SIZE
        &mut size as *mut usize as *mut c_void,
        std::ptr::null_mut(), // CU_LAUNCH_PARAM_END
    ];
    let p = csys::cuLaunchKernel_params {
        f: std::ptr::null_mut(),
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: std::ptr::null_mut(),
        kernelParams: std::ptr::null_mut(),
        extra: extra.as_mut_ptr(),
    };
    // SAFETY: as above, with `extra` instead of kernelParams.
    let view = unsafe { decode(launch_cbid::LAUNCH_KERNEL, &p as *const _ as *const c_void) }
        .expect("decoded");
    let layout = [(0, 8), (8, 8), (16, 4), (20, 4), (24, 4)];
    // SAFETY: `extra` describes a live buffer of `size` bytes.
    let bytes = unsafe { argument_bytes(&view, &layout) }.expect("args");
    assert_eq!(bytes.len(), 28);
    assert_eq!(&bytes[0..8], &0x1000u64.to_le_bytes());
    assert_eq!(&bytes[8..16], &0x2000u64.to_le_bytes());
    assert_eq!(&bytes[24..28], &7i32.to_le_bytes());
}

#[test]
fn decodes_launch_kernel_ex_attributes() {
    // SAFETY: plain data; zero is valid for every field.
    let mut attr: kreplay_cuda::sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = kreplay_cuda::launch::attribute_id(4).expect("CLUSTER_DIMENSION");
    attr.value.clusterDim.x = 4;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    let cfg = kreplay_cuda::sys::CUlaunchConfig {
        gridDimX: 64,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 128,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: std::ptr::null_mut(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let p = csys::cuLaunchKernelEx_params {
        config: &cfg as *const _ as *const _,
        f: std::ptr::null_mut(),
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
    };
    // SAFETY: `p` is a cuLaunchKernelEx parameter block with a live config.
    let view = unsafe {
        decode(
            launch_cbid::LAUNCH_KERNEL_EX,
            &p as *const _ as *const c_void,
        )
    }
    .expect("decoded");
    assert_eq!(view.api, LaunchApi::LaunchKernelEx);
    assert_eq!(view.grid, [64, 1, 1]);
    assert_eq!(view.cluster(), [4, 1, 1]);
    // SAFETY: an unknown callback id is rejected before the parameters are read.
    assert!(unsafe { decode(9999, &p as *const _ as *const c_void) }.is_none());
}
