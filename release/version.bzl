"""pipewright's version: the one place it is written.

Everything else reads it from here: pipewright/version.h (//:version, so the library and the
examples' --version), the pkg-config and CMake files and the release tarball's name
(//release). CHANGELOG.md has a heading for it (//tests/consumers:version_test checks both).
A release moves CHANGELOG.md's Unreleased entries under a new `## X.Y.Z` heading and sets
VERSION to X.Y.Z in the same commit.

Before 1.0, a minor version may change the API (CHANGELOG.md says how to port); any version
may change the ABI, so the shared library's soname carries the whole version.
"""

VERSION = "0.1.0"
