#!/usr/bin/env bash
# Installs pipewright into a prefix: //:install (= //release:install).
#
#   tools/bazel run //:install -- --prefix DIR        (DIR relative to where you typed it)
#
# DIR receives the release tarball's tree (//release:tarball, release/package.bzl):
#   include/                         the headers, e.g. include/pipeline/pipe.h
#   lib/libpipewright.{a,so}         the library, lib/libpipewright_mpi.{a,so} its MPI part
#   lib/pkgconfig/pipewright{,-mpi}.pc
#   lib/cmake/pipewright/pipewrightConfig.cmake, pipewrightConfigVersion.cmake
#   share/doc/pipewright/CHANGELOG.md
# Files already there are replaced; nothing else in DIR is touched (a header an earlier
# version had and this one has not stays: install a new version into an empty DIR). The
# installed files are dated now, so a project built against an earlier install rebuilds what
# includes them. The tree needs neither Bazel nor this checkout: move or copy DIR anywhere.
#
# The first argument, given by the BUILD file, is the tarball (a runfiles path).
set -euo pipefail

usage() { echo "usage: tools/bazel run //:install -- --prefix DIR" >&2; exit 2; }
(($# >= 1)) || usage
tarball=$1
shift
[[ -f $tarball ]] || tarball=${RUNFILES_DIR:-$0.runfiles}/pipewright/$tarball
[[ -f $tarball ]] || { echo "install: the release tarball is missing ($tarball)" >&2; exit 1; }

prefix=
while (($#)); do
  case $1 in
    --prefix) (($# >= 2)) || usage; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    *) usage ;;
  esac
done
[[ -n $prefix ]] || usage
# `bazel run` starts this in the runfiles tree; a relative DIR means where the command was typed.
[[ $prefix == /* ]] || prefix=${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix

mkdir -p "$prefix"
tar -xzf "$tarball" -C "$prefix" --strip-components=1 --touch --no-same-owner
prefix=$(cd "$prefix" && pwd)
version=$(basename "$tarball" | sed -E 's/^pipewright-([^-]+)-.*/\1/')
echo "installed pipewright $version into $prefix:"
mpi=
[[ -e $prefix/lib/libpipewright_mpi.a ]] && mpi=", lib/libpipewright_mpi.{a,so}"
echo "  $(tar -tzf "$tarball" | grep -c '/include/.*\.h$') headers in include/," \
  "lib/libpipewright.{a,so}$mpi"
echo "  CMake:      find_package(pipewright) with -DCMAKE_PREFIX_PATH=$prefix"
echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs pipewright"
