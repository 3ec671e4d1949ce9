//! Links the library as rdma-core's `libibverbs.so.1`: its soname, and the
//! version nodes of every exported name (`libibverbs.map`; the names with
//! two versions are bound by `.symver` directives in `src/symver.rs`).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let map = format!("{dir}/libibverbs.map");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
}
