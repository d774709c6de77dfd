//! A strict stand-in for the CUDA driver library, for testing arrow-device's
//! CUDA module on machines without a GPU: built as `libcuda.so`, loaded by
//! cudarc's dynamic loading in place of the driver (see the README for what
//! it enforces, its settings, and what only hardware can show).
//!
//! Layers, bottom up: `result` (the codes), `control` (settings, faults,
//! accounting), `driver` (devices, contexts, handles), `memory`,
//! `stream` and `module` (the objects and their rules), `ipc` (memory and
//! events shared with other processes), and `api`, the
//! exported `extern "C"` entry points, thin shims over those.
#![deny(unsafe_op_in_unsafe_fn)]
// The entry points' contracts are the CUDA driver API's documentation.
#![allow(clippy::missing_safety_doc)]
// Entry points keep the driver's names.
#![allow(non_snake_case)]

#[macro_use]
mod api;
mod control;
mod driver;
mod ipc;
mod memory;
mod module;
mod result;
mod stream;
