"""Scripts the reliability tests run in their own processes."""
