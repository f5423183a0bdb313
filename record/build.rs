//! Release builds of the injected library link with compressed debug sections: the line tables
//! (file:line in a panic's backtrace, gdb, addr2line) stay, at about a third of their size
//! (most of them the prebuilt standard library's, which no profile setting leaves out).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,--compress-debug-sections=zlib");
    }
}
