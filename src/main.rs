//! The `twin` binary: a thin command line over the library crates.

fn main() {
    println!("twin");
}
