fn main() -> std::process::ExitCode {
    match uroce::cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uroce: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
