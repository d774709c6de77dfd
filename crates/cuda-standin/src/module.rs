//! Modules and kernels: `cuModuleLoadData` reads the `.entry` names and
//! parameter lists of PTX text; a launch runs the entry's host build
//! (`kernels.cpp`: the project's `convert.cu` compiled as C++, launched
//! through the same `host_launch.h` loop as the kernels' own host test).

use std::ffi::{c_char, c_int, CStr, CString};

use crate::result::*;

extern "C" {
    fn cuda_standin_kernel_params(entry: *const c_char) -> c_int;
    fn cuda_standin_run_kernel(
        entry: *const c_char,
        grid: *const u32,
        block: *const u32,
        params: *const u64,
    ) -> c_int;
}

/// An entry point the PTX declares: its name and parameter sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub params: Vec<usize>,
}

/// A loaded module.
#[derive(Debug)]
pub struct Module {
    pub handle: usize,
    pub context: usize,
    pub entries: Vec<Entry>,
}

/// A function of a module.
#[derive(Debug)]
pub struct Function {
    pub handle: usize,
    pub module: usize,
    pub context: usize,
    pub entry: CString,
    /// The number of 8-byte parameters.
    pub params: usize,
}

/// The size of a PTX parameter type (`.u64`, `.b32`, ...).
fn param_size(ty: &str) -> Option<usize> {
    let bits: usize = ty.get(2..)?.parse().ok()?;
    matches!(&ty[..2], ".u" | ".s" | ".b" | ".f")
        .then_some(bits / 8)
        .filter(|size| [1, 2, 4, 8].contains(size))
}

/// The entry points of PTX text: `CUDA_ERROR_INVALID_IMAGE` for something
/// that is not PTX (no `.version` / `.target`), `CUDA_ERROR_INVALID_PTX`
/// for an entry whose parameter list cannot be read.
pub fn parse_ptx(text: &str) -> Result<Vec<Entry>> {
    let directive = |name: &str| text.lines().any(|l| l.trim_start().starts_with(name));
    if !directive(".version") || !directive(".target") {
        return Err(CUDA_ERROR_INVALID_IMAGE);
    }
    let mut entries = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let open = after.find('(').ok_or(CUDA_ERROR_INVALID_PTX)?;
        let close = after.find(')').ok_or(CUDA_ERROR_INVALID_PTX)?;
        if close < open {
            return Err(CUDA_ERROR_INVALID_PTX);
        }
        let name = after[..open].trim().to_string();
        let mut params = Vec::new();
        for param in after[open + 1..close].split(',').map(str::trim) {
            if param.is_empty() {
                continue;
            }
            // `.param .u64 name`
            let mut words = param.split_whitespace();
            let (Some(".param"), Some(ty)) = (words.next(), words.next()) else {
                return Err(CUDA_ERROR_INVALID_PTX);
            };
            params.push(param_size(ty).ok_or(CUDA_ERROR_INVALID_PTX)?);
        }
        entries.push(Entry { name, params });
        rest = &after[close..];
    }
    Ok(entries)
}

/// How many 8-byte parameters the host build of `entry` takes; `None` when
/// the stand-in cannot run it.
pub fn host_params(entry: &CStr) -> Option<usize> {
    // SAFETY: a NUL-terminated name; the function only reads it.
    let count = unsafe { cuda_standin_kernel_params(entry.as_ptr()) };
    usize::try_from(count).ok()
}

/// Runs a launch on the host (from a stream worker).
pub fn run_kernel(entry: &CStr, grid: [u32; 3], block: [u32; 3], params: &[u64]) {
    // SAFETY: `params` holds the entry's parameter count (checked at
    // cuModuleGetFunction and cuLaunchKernel), pointers among them
    // translated to host-accessible aliases kept mapped while queued.
    let status = unsafe {
        cuda_standin_run_kernel(
            entry.as_ptr(),
            grid.as_ptr(),
            block.as_ptr(),
            params.as_ptr(),
        )
    };
    if status != 0 {
        eprintln!("cuda-standin: kernel {entry:?} has no host build");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = include_str!("../../arrow-device/src/device/cuda/kernels/convert.ptx");

    #[test]
    fn the_projects_ptx_declares_both_kernels_with_64_bit_parameters() {
        let entries = parse_ptx(PTX).unwrap();
        assert_eq!(
            entries,
            [
                Entry {
                    name: "arrow_device_pack_bits".into(),
                    params: vec![8; 3]
                },
                Entry {
                    name: "arrow_device_unpack_bits".into(),
                    params: vec![8; 4]
                },
            ]
        );
        for entry in &entries {
            let name = CString::new(entry.name.clone()).unwrap();
            assert_eq!(
                host_params(&name),
                Some(entry.params.len()),
                "{}",
                entry.name
            );
        }
        assert_eq!(host_params(c"arrow_device_nothing"), None);
    }

    #[test]
    fn text_that_is_not_ptx_is_an_invalid_image() {
        assert_eq!(parse_ptx("\x7fELF"), Err(CUDA_ERROR_INVALID_IMAGE));
        assert_eq!(
            parse_ptx(".version 7.0\n.target sm_52\n.entry f(.param .q99 x)"),
            Err(CUDA_ERROR_INVALID_PTX)
        );
        assert_eq!(parse_ptx(".version 7.0\n.target sm_52\n"), Ok(vec![]));
    }

    #[test]
    fn the_host_kernels_pack_and_unpack() {
        let src = [1u8, 0, 3, 0, 0, 0, 0, 9, 1];
        let mut bitmap = [0xAAu8; 2];
        let params = [src.as_ptr() as u64, 9, bitmap.as_mut_ptr() as u64];
        run_kernel(c"arrow_device_pack_bits", [2, 1, 1], [1, 1, 1], &params);
        assert_eq!(bitmap, [0b1000_0101, 0b1]);
        let mut out = [9u8; 5];
        let params = [bitmap.as_ptr() as u64, 4, 5, out.as_mut_ptr() as u64];
        run_kernel(c"arrow_device_unpack_bits", [1, 1, 1], [3, 1, 1], &params);
        assert_eq!(out, [0, 0, 0, 1, 1]);
    }
}
