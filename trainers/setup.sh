#!/usr/bin/env bash
# Prepares a shell for building and testing the trainers module:
#
#   eval "$(trainers/setup.sh)"
#
# It installs only what is missing (idempotent) and prints nothing on stdout
# except `export` lines; progress goes to stderr.
#
# What it provides:
#   - libtensorflow 2.18 (C API) taken from the PyPI wheel tensorflow-cpu 2.18.x,
#     whose libtensorflow_cc.so.2 exports the whole C API (TF_NewGraph,
#     TF_AddGradients, TF_SessionRun, ...). graft links -ltensorflow, so
#     trainers/third_party/lib holds a libtensorflow.so symlink to it.
#   - the Fashion-MNIST data set (Debian package dataset-fashion-mnist).
#   - libonnxruntime.so.1 from the npm package onnxruntime-node, whose C API
#     version (24) matches github.com/yalue/onnxruntime_go v1.27.0.
#
# The downloads live outside the repository in ${SWITCHML_CACHE:-~/.cache/switchml}.
set -euo pipefail

TF_SPEC='tensorflow-cpu==2.18.*'
ORT_NODE_VERSION=1.24.3
FMNIST_DIR=/usr/share/datasets/fashion-mnist

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${SWITCHML_CACHE:-$HOME/.cache/switchml}
third=$here/third_party

log() { echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

mkdir -p "$cache/wheel" "$third/lib"

# --- libtensorflow from the tensorflow-cpu wheel --------------------------------
wheel=$(ls -1 "$cache"/wheel/tensorflow_cpu-2.18.*-cp*-manylinux*x86_64.whl 2>/dev/null | sort -V | tail -n1 || true)
if [[ -z "$wheel" ]]; then
	log "downloading $TF_SPEC wheel (about 230 MB) into $cache/wheel"
	py=$(command -v python3 || command -v python || true)
	[[ -n "$py" ]] || die "python3 with pip is needed to download the tensorflow-cpu wheel"
	"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$cache/wheel" "$TF_SPEC" >&2 ||
		die "pip download $TF_SPEC failed"
	wheel=$(ls -1 "$cache"/wheel/tensorflow_cpu-2.18.*-cp*-manylinux*x86_64.whl | sort -V | tail -n1)
fi
tfver=$(basename "$wheel" | sed -E 's/^tensorflow_cpu-([0-9.]+)-.*/\1/')
tfdir=$cache/tf-$tfver
if [[ ! -f "$tfdir/.complete" ]]; then
	log "unpacking libtensorflow $tfver from $(basename "$wheel")"
	command -v unzip >/dev/null || die "unzip is needed (apt-get install unzip)"
	rm -rf "$tfdir"
	mkdir -p "$tfdir"
	unzip -q -o "$wheel" 'tensorflow/libtensorflow_cc.so.2' 'tensorflow/libtensorflow_framework.so.2' \
		'tensorflow/include/*' -d "$tfdir" >&2
	[[ -f "$tfdir/tensorflow/include/tensorflow/c/c_api.h" ]] ||
		die "wheel $(basename "$wheel") has no tensorflow/include/tensorflow/c/c_api.h"
	if command -v nm >/dev/null; then
		# Read the symbol table once: grep -q on a pipe would SIGPIPE nm under pipefail.
		syms=$(nm -D --defined-only "$tfdir/tensorflow/libtensorflow_cc.so.2")
		for sym in TF_NewGraph TF_AddGradients TF_NewSession TF_SessionRun; do
			grep -q " T $sym@" <<<"$syms" ||
				die "libtensorflow_cc.so.2 in the wheel does not export $sym"
		done
	fi
	touch "$tfdir/.complete"
fi
# Symlinks rather than copies: the libraries are 680 MB.
ln -sfn "$tfdir/tensorflow/libtensorflow_cc.so.2" "$third/lib/libtensorflow.so"
ln -sfn "$tfdir/tensorflow/libtensorflow_cc.so.2" "$third/lib/libtensorflow_cc.so.2"
ln -sfn "$tfdir/tensorflow/libtensorflow_framework.so.2" "$third/lib/libtensorflow_framework.so.2"
ln -sfn "$tfdir/tensorflow/libtensorflow_framework.so.2" "$third/lib/libtensorflow_framework.so"
ln -sfn "$tfdir/tensorflow/include" "$third/include"

# --- Fashion-MNIST ---------------------------------------------------------------
if [[ ! -f "$FMNIST_DIR/train-images-idx3-ubyte.gz" ]]; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		log "installing dataset-fashion-mnist"
		apt-get update -qq >&2 || true
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >&2 ||
			log "warning: apt-get install dataset-fashion-mnist failed; tests that need it will fail"
	else
		log "warning: $FMNIST_DIR is missing; run: sudo apt-get install dataset-fashion-mnist"
	fi
fi

# --- ONNX Runtime from the npm package onnxruntime-node ----------------------------
ortdir=$cache/npm-onnxruntime-node-$ORT_NODE_VERSION
ortlib=$ortdir/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1
if [[ ! -f "$ortlib" ]]; then
	command -v npm >/dev/null || die "npm is needed to fetch onnxruntime-node (apt-get install npm)"
	log "installing onnxruntime-node@$ORT_NODE_VERSION into $ortdir"
	mkdir -p "$ortdir"
	npm install --silent --ignore-scripts --no-audit --no-fund --no-save --prefix "$ortdir" \
		"onnxruntime-node@$ORT_NODE_VERSION" >&2 || die "npm install onnxruntime-node failed"
	[[ -f "$ortlib" ]] || die "onnxruntime-node@$ORT_NODE_VERSION has no $ortlib"
fi

# --- the environment ---------------------------------------------------------------
# The rpath lets binaries built here run without LD_LIBRARY_PATH too.
ld=${LD_LIBRARY_PATH:-}
case ":$ld:" in
*":$third/lib:"*) ;;
*) ld=$third/lib${ld:+:$ld} ;;
esac
cat <<EOF
export CGO_ENABLED=1
export CGO_CFLAGS='-I$third/include'
export CGO_LDFLAGS='-L$third/lib -Wl,-rpath,$third/lib'
export LD_LIBRARY_PATH='$ld'
export ONNXRUNTIME_LIB='$ortlib'
export TF_CPP_MIN_LOG_LEVEL=2
EOF
log "ready: libtensorflow $tfver, onnxruntime-node $ORT_NODE_VERSION"
