#!/usr/bin/env bash
# Packs pipewright's installed tree into a tarball: the action of //release:tarball, whose rule
# (release/package.bzl) gathers every input from the build graph and names it here.
#
#   make_package.sh --out TARBALL --top pipewright-VERSION --cc GCC --ar AR
#                   --core-soname libpipewright.so.V --mpi-soname libpipewright_mpi.so.V|''
#                   --core-always LIST --core-objects LIST --core-flags LIST
#                   --mpi-objects LIST --mpi-flags LIST --headers LIST --files LIST
#
# Object lists hold "PATH MEMBER" lines, --headers and --files "PATH DEST" (DEST relative to
# the tree), flag lists one linker flag a line. The tree:
#
#   include/...                      the headers, at the paths sources include them by
#   lib/libpipewright.a              static: --core-always objects (alwayslink libraries:
#                                    tensor/, and cuda_kernels/ whose start-up registration of
#                                    the CUDA backend no code references) merged into one
#                                    member, so a program that uses the archive links them
#                                    all, as Bazel's alwayslink does; the others as members
#   lib/libpipewright.so.V           shared: every object; soname with the whole version, calls
#                                    between its files direct (-Bsymbolic-functions)
#   lib/libpipewright.so -> libpipewright.so.V
#   lib/libpipewright_mpi.{a,so.V}   likewise for --mpi-objects, linked to libpipewright.so
#   lib/pkgconfig/, lib/cmake/pipewright/, share/doc/pipewright/   --files
set -euo pipefail

while (($#)); do
  case $1 in
    --out) out=$2 ;;
    --top) top=$2 ;;
    --cc) cc=$2 ;;
    --ar) ar=$2 ;;
    --core-soname) core_soname=$2 ;;
    --mpi-soname) mpi_soname=$2 ;;
    --core-always) core_always=$2 ;;
    --core-objects) core_objects=$2 ;;
    --core-flags) core_flags=$2 ;;
    --mpi-objects) mpi_objects=$2 ;;
    --mpi-flags) mpi_flags=$2 ;;
    --headers) headers=$2 ;;
    --files) files=$2 ;;
    *) echo "make_package.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/$top
mkdir -p "$tree/include" "$tree/lib"
root=$PWD

while read -r src dest; do
  install -D -m 644 "$src" "$tree/$dest"
done <"$headers"
while read -r src dest; do
  install -D -m 644 "$src" "$tree/$dest"
done <"$files"

paths() { cut -d' ' -f1 "$1"; }
mapfile -t core_flag_list <"$core_flags"
mapfile -t mpi_flag_list <"$mpi_flags"

# archive OUT ALWAYS_LIST OBJECTS_LIST: the static library.
archive() {
  local out=$1 always=$2 objects=$3 members=$work/members.$RANDOM
  mkdir "$members"
  if [[ -s $always ]]; then
    mapfile -t always_objects < <(paths "$always")
    "$cc" -r -nostdlib -o "$members/pipewright_alwayslink.o" "${always_objects[@]}"
  fi
  while read -r src member; do
    ln -s "$root/$src" "$members/$member"
  done <"$objects"
  (cd "$members" && "$ar" rcsD "$out" ./*)
}

# The shared libraries: every symbol resolved at link time (-z defs), so a library that would
# miss one at load time fails here instead. -Bsymbolic-functions: a call from one of the
# library's files to another's goes straight to it, not through the PLT, as in the Bazel
# build's executables (the objects are compiled with -fno-semantic-interposition, which
# already assumes that no other definition takes the place of the library's own).
# shellcheck disable=SC2054  # the commas are the linker's
shared_flags=(-shared -Wl,-z,defs -Wl,-z,relro,-z,now -Wl,-Bsymbolic-functions)
mapfile -t core_object_list < <(paths "$core_always"; paths "$core_objects")
"$cc" "${shared_flags[@]}" -o "$tree/lib/$core_soname" -Wl,-soname,"$core_soname" \
  "${core_object_list[@]}" "${core_flag_list[@]}" -lstdc++ -lm
ln -s "$core_soname" "$tree/lib/libpipewright.so"
archive "$tree/lib/libpipewright.a" "$core_always" "$core_objects"

if [[ -n $mpi_soname ]]; then
  mapfile -t mpi_object_list < <(paths "$mpi_objects")
  # -rpath $ORIGIN: libpipewright.so beside it, wherever the tree is moved.
  # shellcheck disable=SC2016  # $ORIGIN is the dynamic loader's
  "$cc" "${shared_flags[@]}" -o "$tree/lib/$mpi_soname" -Wl,-soname,"$mpi_soname" \
    "${mpi_object_list[@]}" -L"$tree/lib" -lpipewright -Wl,-rpath,'$ORIGIN' \
    "${mpi_flag_list[@]}" -lstdc++ -lm
  ln -s "$mpi_soname" "$tree/lib/libpipewright_mpi.so"
  archive "$tree/lib/libpipewright_mpi.a" /dev/null "$mpi_objects"
fi

tar --sort=name --owner=0 --group=0 --numeric-owner -C "$work" -cf - "$top" | gzip -n >"$out"
