//! Links the library as rdma-core's `librdmacm.so.1`: its soname and the
//! version nodes of its 68 exported names (`librdmacm.map`). The verbs it
//! calls are resolved at load time in whichever `libibverbs.so.1` the
//! process has (`src/verbs.rs` links against `libibverbs.so.1` by name, for
//! the `NEEDED` entry and the symbol versions).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let map = format!("{dir}/librdmacm.map");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
}
