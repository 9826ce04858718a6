"""What the tests share that is not a test: servers and stubs they stand up, frames they build, polling."""
