"""Custom pyinfra operations: each compares desired with live state and yields only the difference."""
