//! Sharing arrays and streams between processes (work in progress; the
//! design is docs/design/sharing.md).

pub mod codec;
pub mod layout;
#[cfg(target_os = "linux")]
pub mod lease;
#[cfg(target_os = "linux")]
pub mod memfd;
