"""Verified checkpoint generations on local disk and S3-compatible storage."""
