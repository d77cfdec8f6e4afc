# Tempora — every entry point a user needs. `make install` builds .venv/ (editable install);
# every other target depends on it, so `make demo` and `make test` work on a fresh clone.
# Each target is run end to end by tests/product/test_make_targets.py with tiny inputs, through the
# variables below (defaults: the full study). docs/guide/install.md lists targets and variables.
PYTHON ?= python3
VENV   ?= .venv
STAMP  := $(VENV)/.installed
# Everything: the tracer, the simulator and the developer tools.
EXTRAS ?= trace,sim,cluster,dev
# `make PY=/path/to/python …` runs the targets with that interpreter as it is: no venv, no
# install step (the environment must already hold the project and its extras).
ifeq ($(origin PY),command line)
INSTALL :=
else
PY      := $(VENV)/bin/python
INSTALL := $(STAMP)
endif

TRACE  := $(PY) -m tempora_trace.cli
SIM    := $(PY) -m tempora_sim.commands.main
# Where traces and results go (the committed demo set lives in traces/demo).
TRACES  ?= traces
RESULTS ?= results

.PHONY: install test test-fast test-deps bench vendor docs demo demo-run demo-traces demo-trace-files demo-models validate validate-gpu validate-clock lint clean \
        field field-run field-traces field-trace-files \
        predict-validate predict-validate-run \
        paper paper-vit paper-cifar paper-traces paper-vit-traces paper-cifar-traces

# Never two recipes at once, whatever -j says: two traces on one machine would time each other
# (several devices: `tempora-trace campaign`, docs/guide/cluster.md).
.NOTPARALLEL:

install: $(INSTALL)

# With the simulator installed, its replay kernels are compiled once into Numba's cache
# (tempora_sim/sweeps/kernel_cache.py): the first sweeps of a fresh install, several processes
# at once in a test run, then load them instead of each compiling them (about 14 s of CPU each).
# The compile needs only the base install (the simulator), so it runs on one core while pip
# installs the other extras (torch's wheels: mostly unpacking, on the other core).

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(findstring sim,$(EXTRAS)),$(install_beside_kernels),$(PY) -m pip install --quiet -e '.[$(EXTRAS)]')
	touch $(STAMP)

# the base install, then the kernels' compile in the background beside the extras' install;
# fails if either fails
define install_beside_kernels
$(PY) -m pip install --quiet -e . && { $(PY) -m tempora_sim.sweeps.kernel_cache & kernels=$$!; \
	  $(PY) -m pip install --quiet -e '.[$(EXTRAS)]'; extras=$$?; wait $$kernels && exit $$extras; }
endef

# `make test`: the whole suite, on every core (pytest-xdist; `--dist loadgroup` keeps a module's
# shared fixture on one worker), each test under a timeout (pyproject.toml). `make test-fast`:
# all but the `slow` marks (end to end, browser, hostile suite), for the edit-and-check loop.
# TEST_WORKERS=0: one process, no workers; PYTEST_OPTS adds options (CI: --durations=25). One
# worker per core: a third worker on two cores made the fresh-clone suite slower (8 min 26 s
# against 7 min 49 s), its tests' own processes competing with the other two.
TEST_WORKERS ?= auto
PYTEST_OPTS  ?=
PYTEST = $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_OPTS)

test: install test-deps
	$(PYTEST) tests

test-fast: install
	$(PYTEST) -m "not slow" tests

# What the suite needs beyond the Python environment (headless Chromium for the browser tests):
# installed from the distribution's packages where this user can, otherwise one line naming the command.
test-deps:
	@bash tools/provision_test_deps.sh

bench: install
	$(PY) bench/bench_sim.py
	$(PY) bench/bench_trace.py
	$(PY) bench/bench_stats.py
	$(PY) bench/bench_timing.py
	$(PY) bench/bench_arrivals.py
	$(PY) bench/bench_plugins.py
	$(PY) bench/bench_folder.py
	$(PY) bench/bench_explore.py
	$(PY) bench/bench_help.py
	$(PY) bench/bench_answers.py

# `make vendor`: refresh the chart library the explore page inlines (Apache ECharts) from the
# npm registry, its tarball checked against the pinned sha512 integrity (tools/vendor_echarts.py).
# The file is committed with its licence and VENDOR.json, so pages build offline from a clone.
vendor:
	$(PYTHON) tools/vendor_echarts.py $(VENDOR_OPTS)

# `make lint`: ruff's lint rules and the import contracts (pyproject.toml: the simulator never
# imports torch, tracer and simulator meet only in tempora_schema, no import cycles), then
# `ruff format --check` on FORMATTED (everything ruff formats).
FORMATTED ?= src tests bench tools
lint: install
	$(PY) -m ruff check src tests bench tools
	$(dir $(PY))lint-imports --no-cache --no-logo
	$(if $(strip $(FORMATTED)),$(PY) -m ruff format --check $(FORMATTED))

# The documentation site (mkdocs.yml) into site/, warnings as errors. Generated parts (CLI
# reference, methods table) are written from the code at build time, so they never go stale.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),docs]'
	touch $(DOCS_STAMP)

docs: $(if $(INSTALL),$(DOCS_STAMP))
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site
	@echo "documentation: site/index.html"

# ------------------------------------------------------------------ demo (no download)
# `make demo`: trace every method that fits each demo model on three corruptions, sweep all
# protocols and write the report. Traces are taken one at a time (`-j1` below, whatever -j the
# caller gave): traces of one comparison group are compared with each other, so none may be
# measured while another runs beside it. Trace files are Make targets, so an interrupted demo
# resumes (`--resume` picks up the last complete episode) and finished traces are kept.
# The workload (3 corruptions × 50 batches, one thread; docs/design/timing.md) fits ~10 minutes on 2 cores.
DEMO_DOMAINS ?= gaussian_noise fog contrast
DEMO_MODELS  ?= demo-resnet demo-resnet-gn
# Empty: every method that fits each demo model but the field's (asked of the tracer:
# `list --methods-for MODEL --demo-set`; the field's methods cost up to 90 times `standard`'s
# events, docs/results/methods-parity.md). A list: just those.
DEMO_METHODS ?=
DEMO_DEVICE  ?= cpu
DEMO_OUT     ?= $(RESULTS)/demo
DEMO_TRACES  ?= $(DEMO_OUT)/traces
# Traces of one comparison group are never taken concurrently: one trace at a time, whatever
# -j the caller gives (two traces on two cores would time each other).
# The idle blocks (tempora_trace/variability.py) at one gap, 1× the median δ: about 96 δ per
# trace, as the idle pass cost before them; at the default three gaps, 228 δ, they would add
# several minutes to the demo. A user's trace and `make demo-traces` take the defaults.
DEMO_TRACE_OPTS ?= --max-batches 50 --frozen-sample 4 --threads 1 --idle-gaps 1x
# The committed set (`make demo-traces`): all methods, all 15 corruptions, severity 5, the first
# 80 batches (5,120 images) of each; about 30 minutes on an idle 2-core CPU, one trace at a time.
DEMO_SET            ?= $(TRACES)/demo
DEMO_SET_DOMAINS    ?= all
DEMO_SET_TRACE_OPTS ?= --max-batches 80 --frozen-sample 8 --threads 1
# Where `make demo-models` writes the retrained weights (the committed ones by default).
DEMO_MODELS_OUT     ?= src/tempora_trace/models/weights
DEMO_MODELS_OPTS    ?=

# $(call demo_files,ROOT): ROOT/<model>/<device>/<method>.parquet for every method that fits
# each demo model (asked of the tracer, so the lists never go stale) but the field's. Expanded in recipes
# only, after `install` made the tracer importable.
demo_files = $(foreach model,$(DEMO_MODELS),\
    $(addprefix $(1)/$(model)/$(DEMO_DEVICE)/,$(addsuffix .parquet,$(or $(DEMO_METHODS),$(shell $(TRACE) list --methods-for $(model) --demo-set)))))

demo: install
	@$(MAKE) --no-print-directory -j1 demo-run \
	    DEMO_FILES='$(call seed_files,$(call demo_files,$(DEMO_TRACES)))'

# The committed set: all methods, all 15 corruptions, severity 5, one trace at a time.
demo-traces: install
	@$(MAKE) --no-print-directory -j1 demo-trace-files \
	    DEMO_TRACES='$(DEMO_SET)' DEMO_DOMAINS='$(DEMO_SET_DOMAINS)' DEMO_TRACE_OPTS='$(DEMO_SET_TRACE_OPTS)' \
	    DEMO_FILES='$(call demo_files,$(DEMO_SET))'

demo-trace-files: $(DEMO_FILES)

demo-run: $(DEMO_FILES)
	$(SIM) report $(DEMO_TRACES) --out $(DEMO_OUT)/report --scenarios
	@echo "report: $(DEMO_OUT)/report/report.md"

# <root>/<model>/<device>/<method>.parquet; the model is the stem's first path component.
$(DEMO_TRACES)/%.parquet:
	$(TRACE) run --dataset demo --model $(firstword $(subst /, ,$*)) --method $(basename $(notdir $@)) \
	    --device $(DEMO_DEVICE) --domains $(DEMO_DOMAINS) --out $(@D) --name $(basename $(notdir $@)) \
	    $(DEMO_TRACE_OPTS) $(if $(wildcard $(@D)/$(basename $(notdir $@)).partial),--resume)

demo-models: install
	$(PY) -m tempora_trace.models.train_demo --out $(DEMO_MODELS_OUT) $(DEMO_MODELS_OPTS)

# ------------------------------------------------------------------ field study (no download)
# `make field`: the field's methods (CoTTA, RoTTA, ROID, T3A, MEMO, EATA) beside the paper's, on
# the demo data in the continual benchmarks' streams: a long continual stream (3 rounds), the
# mixed-domain stream and the gradual severity ramp. Each stream is its own comparison group
# (the stream is part of the group key), so the report gives each stream's standings side by
# side under every protocol, and explore.html lets you move the pressure over each. One trace
# at a time (-j1), trace files as Make targets (an interrupted study resumes), as for the demo.
# Cost of the defaults on an idle 2-core CPU, one thread, batch 64 (estimated from measured
# per-event costs: MEMO's δ ≈ 330 times standard's, CoTTA's ≈ 110 times): events per method = 3 domains × 5 batches ×
# (3 rounds + 1 mixed + 9 gradual ramp steps) = 195, 3,510 over the 18 methods that fit
# demo-resnet. MEMO (≈ 4.4 s an event: augmented views of every image) takes ≈ 15 min of them,
# warm-up included, and CoTTA (≈ 1.6 s: 32 augmented teacher forwards per batch) ≈ 5.5 min; the
# other 16 together ≈ 2.5 min (15-100 ms an event); start-up, warm-up and checkpoint scoring of
# the 54 traces (≈ 6 s each) ≈ 5.5 min, the sweep, report and page ≈ 2 min. Measured: 51 min 30 s,
# MEMO 30 min and CoTTA 10 min of it (each trace's variability measurement adds ≈ 68 events).
# `FIELD_METHODS="standard tent cotta"` restricts the list (keep `standard`: it fixes λ).
FIELD_MODEL   ?= demo-resnet
# Empty: every method that fits FIELD_MODEL, the paper's and the field's (`list --methods-for MODEL`).
FIELD_METHODS ?=
# Stream folders: continual, mixed or gradual, `-xN` for N rounds (`continual-x3`: `--stream
# continual --rounds 3`).
FIELD_STREAMS ?= continual-x3 mixed gradual
FIELD_DOMAINS ?= gaussian_noise fog contrast
FIELD_DEVICE  ?= cpu
FIELD_OUT     ?= $(RESULTS)/field
FIELD_TRACES  ?= $(FIELD_OUT)/traces
# Batches per domain (per ramp step in the gradual stream, per round in the long one; the mixed
# stream keeps 5 × 3 domains).
FIELD_TRACE_OPTS ?= --max-batches 5 --frozen-sample 4 --threads 1
# Options of the sweep and of the page (e.g. `--lambda-ms 50ms`); the sweep covers every protocol.
FIELD_SWEEP_OPTS ?=

# $(FIELD_TRACES)/<model>/<stream>/<method>.parquet for every stream and every method that fits
# the model (asked of the tracer once, not once per stream: expanded in recipes only, after `install`).
field_files_of = $(foreach stream,$(FIELD_STREAMS),$(addprefix $(FIELD_TRACES)/$(FIELD_MODEL)/$(stream)/,$(addsuffix .parquet,$(1))))
field_files = $(call field_files_of,$(or $(FIELD_METHODS),$(shell $(TRACE) list --methods-for $(FIELD_MODEL))))

field: install
	@$(MAKE) --no-print-directory -j1 field-run FIELD_FILES='$(field_files)'

field-traces: install
	@$(MAKE) --no-print-directory -j1 field-trace-files FIELD_FILES='$(field_files)'

field-trace-files: $(FIELD_FILES)

field-run: $(FIELD_FILES)
	$(SIM) sweep $(FIELD_TRACES) --out $(FIELD_OUT) --protocol all $(FIELD_SWEEP_OPTS)
	$(SIM) report $(FIELD_OUT) --out $(FIELD_OUT)/report
	$(SIM) explore $(FIELD_TRACES) --out $(FIELD_OUT)/explore.html --quiet --protocol all $(FIELD_SWEEP_OPTS)
	@echo "report: $(FIELD_OUT)/report/report.md"
	@echo "page: $(FIELD_OUT)/explore.html"

# <traces>/<model>/<stream>[-x<rounds>]/<method>.parquet: model, stream and rounds from the path.
field_stream = $(subst -x, ,$(word 2,$(subst /, ,$(1))))
$(FIELD_TRACES)/%.parquet:
	$(TRACE) run --dataset demo --model $(firstword $(subst /, ,$*)) --method $(notdir $*) \
	    --stream $(word 1,$(call field_stream,$*)) $(addprefix --rounds ,$(word 2,$(call field_stream,$*))) \
	    --device $(FIELD_DEVICE) --domains $(FIELD_DOMAINS) --out $(@D) --name $(notdir $*) \
	    $(FIELD_TRACE_OPTS) $(if $(wildcard $(@D)/$(notdir $*).partial),--resume)

# ------------------------------------------------------------------ seeds
# `make demo SEEDS="2025 2026 2027"`: every demo trace once per seed, named <method>-seed<S>.parquet
# beside each other; the simulator pools the seeds of a group like its episodes (per-seed rows
# stay in utility.parquet) and the report says how stable the winners are across seeds.
# Without SEEDS: one trace per method at the tracer's default seed, named <method>.parquet.
SEEDS ?=
seed_files = $(if $(strip $(SEEDS)),$(foreach s,$(SEEDS),$(patsubst %.parquet,%-seed$(s).parquet,$(1))),$(1))

define demo_seed_rule
$$(DEMO_TRACES)/%-seed$(1).parquet:
	$$(TRACE) run --dataset demo --model $$(firstword $$(subst /, ,$$*)) --method $$(notdir $$*) --seed $(1) \
	    --name $$(notdir $$*)-seed$(1) --device $$(DEMO_DEVICE) --domains $$(DEMO_DOMAINS) --out $$(@D) $$(DEMO_TRACE_OPTS) \
	    $$(if $$(wildcard $$(@D)/$$(notdir $$*)-seed$(1).partial),--resume)
endef
$(foreach s,$(SEEDS),$(eval $(call demo_seed_rule,$(s))))

# ------------------------------------------------------------------ validate (how faithful is the replay?)
# `make validate`: play four adapting methods and the baseline on the demo benchmark live
# against a real clock (discrete ρ = 100, 70, 50 and 25 %, b = 1, and one amortised budget;
# every setting VALIDATE_REPEATS times) and trace each in the same process, episode by episode
# beside its live runs (--trace-alongside), then `tempora-sim validate` puts replay and live side
# by side, reports how many live outcomes fall inside the replay's timing interval (coverage),
# and exits 1 when a target is missed (docs/guide/validation.md). VALIDATE_ALONGSIDE=no traces every
# method first instead (the replay of a trace taken minutes earlier: what a machine drifting in
# speed does to it). One thing at a time: a live run beside another job would time that job.
# The defaults take 11 to 17 minutes on an idle 2-core CPU (nine runs measured).
VALIDATE_METHODS ?= standard tent eta sar cmf
# One sparse-adaptation policy (docs/design/design.md §11) played live beside its trace, too: the method
# and the policy (empty VALIDATE_POLICY: none).
VALIDATE_POLICY_METHOD ?= tent
VALIDATE_POLICY  ?= every:2
VALIDATE_DOMAINS ?= gaussian_noise,fog
VALIDATE_BATCHES ?= 25
VALIDATE_PROTOCOL ?= discrete,amortised
VALIDATE_RHO     ?= 1,0.7,0.5,0.25
VALIDATE_B       ?= 1s
VALIDATE_REPEATS ?= 10
# The baseline and the policy are played fewer times: the coverage check is about the four methods.
VALIDATE_BASELINE_REPEATS ?= 2
VALIDATE_POLICY_REPEATS ?= 2
VALIDATE_LAMBDA_RULE ?= paper
VALIDATE_DEVICE  ?= cpu
VALIDATE_ALONGSIDE ?= yes
VALIDATE_OUT     ?= results/validate
VALIDATE_OPTS    ?= --dataset demo --model demo-resnet --device $(VALIDATE_DEVICE) --domains $(VALIDATE_DOMAINS) \
                    --max-batches $(VALIDATE_BATCHES) --threads 1 --force
# Checkpoints scored on 16 later batches each (the amortised replay reads them).
VALIDATE_TRACE_OPTS ?= --frozen-sample 16
# Options of `tempora-sim validate` (its tolerances: docs/guide/validation.md).
VALIDATE_CHECK_OPTS ?=
# no: play and trace only, without the closing `tempora-sim validate` (validate-clock runs it
# itself, after the traces taken after the live runs).
VALIDATE_CHECK ?= yes

validate: install
	@mkdir -p $(VALIDATE_OUT)
	@echo "trace standard (λ)"; \
	$(TRACE) run --method standard $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/traces --no-default-checkpoints || exit 2
	@for m in $(filter-out standard,$(VALIDATE_METHODS)); do \
	    [ "$(VALIDATE_ALONGSIDE)" = yes ] && break; \
	    echo "trace $$m"; \
	    $(TRACE) run --method $$m $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/traces $(VALIDATE_TRACE_OPTS) || exit 2; \
	done
	@for m in $(VALIDATE_METHODS); do \
	    pair=$$( [ $$m != standard ] && [ "$(VALIDATE_ALONGSIDE)" = yes ] && echo --trace-alongside $(VALIDATE_OUT)/traces $(VALIDATE_TRACE_OPTS) ); \
	    echo "live $$m"; \
	    $(TRACE) live --method $$m $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/live --standard $(VALIDATE_OUT)/traces \
	        --protocol $(VALIDATE_PROTOCOL) --rho $(VALIDATE_RHO) --queue 1 $(if $(findstring amortised,$(VALIDATE_PROTOCOL)),--B $(VALIDATE_B)) \
	        --lambda-rule $(VALIDATE_LAMBDA_RULE) --repeats $$( [ $$m = standard ] && echo $(VALIDATE_BASELINE_REPEATS) || echo $(VALIDATE_REPEATS) ) \
	        $$pair || exit 2; \
	done
	@if [ -n "$(VALIDATE_POLICY)" ]; then \
	    pair=$$( [ "$(VALIDATE_ALONGSIDE)" = yes ] && echo --trace-alongside $(VALIDATE_OUT)/traces $(VALIDATE_TRACE_OPTS) ); \
	    if [ "$(VALIDATE_ALONGSIDE)" != yes ]; then \
	        echo "trace $(VALIDATE_POLICY_METHOD) --policy $(VALIDATE_POLICY)"; \
	        $(TRACE) run --method $(VALIDATE_POLICY_METHOD) --policy $(VALIDATE_POLICY) $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/traces \
	            $(VALIDATE_TRACE_OPTS) || exit 2; \
	    fi; \
	    echo "live $(VALIDATE_POLICY_METHOD) --policy $(VALIDATE_POLICY)"; \
	    $(TRACE) live --method $(VALIDATE_POLICY_METHOD) --policy $(VALIDATE_POLICY) $(VALIDATE_OPTS) --out $(VALIDATE_OUT)/live \
	        --standard $(VALIDATE_OUT)/traces --protocol $(VALIDATE_PROTOCOL) --rho $(VALIDATE_RHO) --queue 1 \
	        $(if $(findstring amortised,$(VALIDATE_PROTOCOL)),--B $(VALIDATE_B)) --lambda-rule $(VALIDATE_LAMBDA_RULE) \
	        --repeats $(VALIDATE_POLICY_REPEATS) $$pair || exit 2; \
	fi
	$(if $(filter yes,$(VALIDATE_CHECK)),$(SIM) validate $(VALIDATE_OUT)/live --traces $(VALIDATE_OUT)/traces --out $(VALIDATE_OUT)/report $(VALIDATE_CHECK_OPTS))

# `make validate-gpu`: the same check on a GPU without ImageNet-C on disk: ResNet-50 with
# random weights (timing only: α and the decisions are compared, accuracies mean nothing) on a
# synthetic 224-px JPEG folder in the ImageNet-C layout (`tempora-trace synthesize`, written
# once and reused), GPU_BATCHES batches of GPU_BATCH_SIZE per corruption, on GPU_DOMAINS; the
# coverage settings of `make validate` (both protocols, ten live runs each). About 10 minutes on
# an H100 with VALIDATE_POLICY= (docs/results/validation-runs.md).
GPU_DEVICE     ?= cuda
GPU_MODEL      ?= resnet50
GPU_BATCHES    ?= 25
GPU_BATCH_SIZE ?= 64
GPU_DATA       ?= $(RESULTS)/synthetic-imagenet-c
GPU_DOMAINS    ?= gaussian_noise,fog
GPU_PROTOCOL   ?= discrete,amortised
GPU_TRACE_OPTS ?= $(if $(findstring amortised,$(GPU_PROTOCOL)),--frozen-sample 16,--no-default-checkpoints)
GPU_VALIDATE_OUT ?= $(RESULTS)/validate-gpu
# λ = median + 6·1.4826·MAD of standard's δ: on a shared GPU host one 30 ms stall among 11 ms
# batches triples mean + 6σ, and every setting is then served whole (nothing left to check).
GPU_LAMBDA_RULE  ?= robust
# Host memory for one staged chunk (MiB): by default a whole episode (602112 bytes a 224-px
# fp32 image, plus slack), so a live episode is staged once for all its runs and never pauses.
GPU_STAGE_MB   ?= $$(( $(GPU_BATCHES) * $(GPU_BATCH_SIZE) * 602112 / 1048576 + 64 ))
validate-gpu: install
	$(TRACE) synthesize $(GPU_DATA) --domains $(GPU_DOMAINS) --images $$(( $(GPU_BATCHES) * $(GPU_BATCH_SIZE) )) --quiet
	@$(MAKE) --no-print-directory validate VALIDATE_DEVICE=$(GPU_DEVICE) VALIDATE_OUT=$(GPU_VALIDATE_OUT) VALIDATE_LAMBDA_RULE=$(GPU_LAMBDA_RULE) \
	    VALIDATE_PROTOCOL=$(GPU_PROTOCOL) VALIDATE_TRACE_OPTS="$(GPU_TRACE_OPTS)" \
	    VALIDATE_OPTS="--dataset imagenet-c --data-root $(GPU_DATA) --model $(GPU_MODEL) --weights random --device $(GPU_DEVICE) \
	    --domains $(GPU_DOMAINS) --max-batches $(GPU_BATCHES) --batch-size $(GPU_BATCH_SIZE) --stage-mb $(GPU_STAGE_MB) --force $(GPU_OPTS)"

# `make validate-clock`: is the traced clock the live one? The sandwich of
# docs/results/validation-runs.md ("Traced and live clocks"): each of CLOCK_METHODS traced in its
# own process as a user traces, played live at CLOCK_RHO (CLOCK_REPEATS runs each) and traced
# again, method after method (`standard` first: λ comes from its trace), so each sandwich spans a
# minute or two of the machine's time rather than the whole run (CLOCK_ORDER=blocks: every trace
# first, then every live run, then every trace again, as the runs before this order were
# taken). `tempora-sim validate` checks each setting against the traces before
# (report/) and after (report-after/): the replay against the live runs, and the live events'
# mean δ against the traced δ of the same batches with the trace's idle effect applied, as the
# geometric mean of the two sides (--sandwich: a steady drift of the machine cancels; within
# --clock-tol-pct, 5 %, or the two traces' pass-to-pass spread). Each side's own gap is in its
# report too. Exit 1 when a comparison misses, or when a clock check passes only on that spread
# (inconclusive). About 6 minutes on an idle 2-core CPU; one thing at a time, as for `make validate`.
CLOCK_METHODS ?= standard tent cmf
CLOCK_RHO     ?= 1,0.5,0.25
CLOCK_BATCHES ?= 100
CLOCK_DOMAINS ?= gaussian_noise
CLOCK_REPEATS ?= 3
CLOCK_OUT     ?= $(RESULTS)/validate-clock
# A speed probe every 25 batches: four per 100-batch trace, so the tracer can say when the machine
# changed speed while it ran (it needs three).
CLOCK_OPTS    ?= --dataset demo --model demo-resnet --device $(VALIDATE_DEVICE) --domains $(CLOCK_DOMAINS) \
                 --max-batches $(CLOCK_BATCHES) --threads 1 --probe-every 25 --force
CLOCK_ORDER   ?= method
validate-clock: install
	@status=0; \
	$(if $(filter blocks,$(CLOCK_ORDER)),$(clock_in_blocks),$(clock_by_method)) \
	$(SIM) validate $(CLOCK_OUT)/live --traces $(CLOCK_OUT)/traces --sandwich $(CLOCK_OUT)/traces-after \
	    --out $(CLOCK_OUT)/report $(VALIDATE_CHECK_OPTS) || status=$$?; \
	[ $$status -le 1 ] || exit $$status; \
	$(SIM) validate $(CLOCK_OUT)/live --traces $(CLOCK_OUT)/traces-after --sandwich $(CLOCK_OUT)/traces \
	    --out $(CLOCK_OUT)/report-after $(VALIDATE_CHECK_OPTS) || status=$$?; \
	exit $$status

# trace ($$1: traces or traces-after), as `make validate` traces: `standard` without checkpoints
clock_trace = $(TRACE) run --method $$m $(CLOCK_OPTS) --out $(CLOCK_OUT)/$(1) \
	$$( [ $$m = standard ] && echo --no-default-checkpoints || echo $(VALIDATE_TRACE_OPTS) )

# each method's sandwich around its own live runs; `standard` first (its trace gives λ) and
# played only when CLOCK_METHODS names it
define clock_by_method
mkdir -p $(CLOCK_OUT); \
	for m in standard $(filter-out standard,$(CLOCK_METHODS)); do \
	    played=$(if $(filter standard,$(CLOCK_METHODS)),yes,no); [ $$m = standard ] || played=yes; \
	    echo "trace $$m"; $(call clock_trace,traces) || exit 2; \
	    [ $$played = yes ] || continue; \
	    echo "live $$m"; \
	    $(TRACE) live --method $$m $(CLOCK_OPTS) --out $(CLOCK_OUT)/live --standard $(CLOCK_OUT)/traces --protocol discrete \
	        --rho $(CLOCK_RHO) --queue 1 --lambda-rule $(VALIDATE_LAMBDA_RULE) --repeats $(CLOCK_REPEATS) || exit 2; \
	    echo "trace $$m again"; $(call clock_trace,traces-after) --quiet || exit 2; \
	done;
endef

# every trace, then every live run (`make validate`'s order), then every trace again
define clock_in_blocks
$(MAKE) --no-print-directory validate VALIDATE_ALONGSIDE=no VALIDATE_METHODS="$(CLOCK_METHODS)" VALIDATE_RHO=$(CLOCK_RHO) \
	    VALIDATE_PROTOCOL=discrete VALIDATE_REPEATS=$(CLOCK_REPEATS) VALIDATE_BASELINE_REPEATS=$(CLOCK_REPEATS) VALIDATE_POLICY= \
	    VALIDATE_OUT=$(CLOCK_OUT) VALIDATE_OPTS="$(CLOCK_OPTS)" VALIDATE_CHECK=no || exit 2; \
	for m in $(CLOCK_METHODS); do \
	    echo "trace $$m again"; $(call clock_trace,traces-after) --quiet || exit 2; \
	done;
endef

# ------------------------------------------------------------------ predict (answers for devices not traced)
# `make predict-validate`: how far a predicted trace can be trusted, on "devices" this machine
# has that scale the phases differently (one and two torch threads). For every thread count in
# PV_THREADS: a full trace and a profile (`tempora-trace profile`) of every method that fits each
# demo model on PV_DOMAINS; then every thread count predicted from every other
# (`tempora-sim predict`) and checked against its full traces (`tempora-sim validate-prediction`,
# beside the two baselines), into $(PV_OUT)/validation-<from>to<to>.txt. A timing measurement:
# run it on an idle machine. Each file is its own target (an interrupted run resumes), and
# $(PV_OUT)/wall.tsv records every command's wall time (profile vs trace cost, start-up included).
PV_OUT          ?= $(RESULTS)/predict-validate
PV_THREADS      ?= 1 2
PV_MODELS       ?= demo-resnet demo-resnet-gn
# Empty: every method that fits each demo model (asked of the tracer).
PV_METHODS      ?=
PV_DOMAINS      ?= gaussian_noise fog contrast
# The full traces: the whole demo stream of each corruption (156 batches), checkpoints sampled.
PV_TRACE_OPTS   ?= --frozen-sample 8
# The profiles: the default length (auto: 2.5 % of the longest episode, at least 8; 8 here).
PV_PROFILE_OPTS ?=
# Shared by traces and profiles (the configuration both must agree on).
PV_OPTS         ?= --dataset demo --device cpu --quiet
PV_VALIDATE_OPTS ?=

# $(PV_OUT)/traces/<n>thr/<model>/<method>.parquet and its profile under profiles/, for every
# thread count, model and method (expanded in recipes only, after `install` made the tracer
# importable). Each method's profile is taken right after its full trace, so the pair meets the
# machine at one speed (a VM's speed moves by tens of percent over minutes; the transfer is
# fitted on the pair). The tracer is asked for each model's methods once, not once per thread count.
pv_pairs_of = $(foreach thr,$(PV_THREADS),$(foreach mm,$(1),$(PV_OUT)/traces/$(thr)thr/$(mm).parquet $(PV_OUT)/profiles/$(thr)thr/$(mm).parquet))
pv_pairs = $(call pv_pairs_of,$(foreach model,$(PV_MODELS),$(addprefix $(model)/,$(or $(PV_METHODS),$(shell $(TRACE) list --methods-for $(model) --demo-set)))))

predict-validate: install
	@$(MAKE) --no-print-directory -j1 predict-validate-run PV_FILES='$(pv_pairs)'

predict-validate-run: $(PV_FILES)
	set -e; for src in $(PV_THREADS); do for dst in $(PV_THREADS); do \
	    if [ "$$src" = "$$dst" ]; then continue; fi; \
	    $(SIM) predict $(PV_OUT)/traces/$${src}thr --profiles $(PV_OUT)/profiles/$${dst}thr --out $(PV_OUT)/predicted/$${src}to$${dst}; \
	    $(SIM) validate-prediction $(PV_OUT)/predicted/$${src}to$${dst} --against $(PV_OUT)/traces/$${dst}thr \
	        --source $(PV_OUT)/traces/$${src}thr --profiles $(PV_OUT)/profiles/$${dst}thr $(PV_VALIDATE_OPTS) \
	        > $(PV_OUT)/validation-$${src}to$${dst}.txt; \
	    cat $(PV_OUT)/validation-$${src}to$${dst}.txt; done; done
	if [ -f $(PV_OUT)/wall.tsv ]; then awk '{ s[$$1] += $$4 - $$3 } END { if (s["trace"] > 0) printf "profiles: %.1f %% of the full traces wall time (start-up included)%s\n", 100 * s["profile"] / s["trace"], "$(if $(strip $(PV_TRACE_OPTS)),; traces with $(strip $(PV_TRACE_OPTS)): not the tracer defaults the 5 % cost target is set against)" }' $(PV_OUT)/wall.tsv; fi

# <out>/traces/<n>thr/<model>/<method>.parquet and <out>/profiles/…: threads, model and method from the path.
$(PV_OUT)/traces/%.parquet:
	@mkdir -p $(PV_OUT)
	start=$$(date +%s.%N) && $(TRACE) run --method $(basename $(notdir $@)) --model $(word 2,$(subst /, ,$*)) \
	    --threads $(subst thr,,$(firstword $(subst /, ,$*))) --domains $(PV_DOMAINS) --out $(@D) --name $(basename $(notdir $@)) \
	    $(PV_OPTS) $(PV_TRACE_OPTS) $(if $(wildcard $(@D)/$(basename $(notdir $@)).partial),--resume) \
	    && echo "trace $* $$start $$(date +%s.%N)" >> $(PV_OUT)/wall.tsv

$(PV_OUT)/profiles/%.parquet:
	@mkdir -p $(PV_OUT)
	start=$$(date +%s.%N) && $(TRACE) profile --method $(basename $(notdir $@)) --model $(word 2,$(subst /, ,$*)) \
	    --threads $(subst thr,,$(firstword $(subst /, ,$*))) --domains $(PV_DOMAINS) --out $(@D) --name $(basename $(notdir $@)) \
	    $(PV_OPTS) $(PV_PROFILE_OPTS) $(if $(wildcard $(@D)/$(basename $(notdir $@)).partial),--resume) \
	    && echo "profile $* $$start $$(date +%s.%N)" >> $(PV_OUT)/wall.tsv

# ------------------------------------------------------------------ paper reproduction
# `make paper DATA=/path/to/ImageNet-C [WEIGHTS=resnet50-0676ba61.pth] DEVICE=cuda`
# Each trace is its own target, taken one at a time (.NOTPARALLEL above); several GPUs or
# machines: run campaigns/paper.toml with `tempora-trace campaign`. λ comes from the
# `standard` trace of each group.
# Results: $(RESULTS)/<study>/utility.{parquet,csv} (the sweep) and $(RESULTS)/<study>/report/.
DATA    ?=
WEIGHTS ?=
DEVICE  ?= cuda
PAPER_METHODS       ?= standard adabn lame neo tent eta shot-im sar deyo cmf
PAPER_VIT_METHODS   ?= standard lame neo tent eta shot-im sar deyo cmf spa zerosiam
PAPER_CIFAR_METHODS ?= standard adabn lame neo tent eta shot-im sar
# Corruptions traced (severity 5), at most MAX_BATCHES batches each (empty: all), and any
# further tracer options (e.g. `TRACE_OPTS='--batch-size 32 --threads 4'`).
PAPER_DOMAINS ?= all
MAX_BATCHES   ?=
TRACE_OPTS    ?=
# The paper's grids, swept with the reference code's `overshoot` budget rule: ResNet-50 uses
# the sweep defaults; ViT-B/16 (Tables 32-34) its own; CIFAR budgets come from CIFAR_B.
CIFAR_B                ?=
PAPER_SWEEP_OPTS       ?= --budget-rule overshoot
PAPER_VIT_SWEEP_OPTS   ?= --budget-rule overshoot --T 200,400,1000,2000 --B 2.5s,5s,10s,20s,40s,80s
PAPER_CIFAR_SWEEP_OPTS ?= --budget-rule overshoot --protocol offline,discrete,amortised $(CIFAR_B)
# Further sweep options for every study, after the paper's (e.g. `SWEEP_OPTS='--lambda-ms 40ms'`).
SWEEP_OPTS ?=

# $(call study,NAME,DATASET,MODEL,METHODS,SWEEP_OPTS): the study's traces are file targets
# named by method; the study itself sweeps them into $(RESULTS)/NAME and reports that sweep.
define study
$(1)_DIR := $(TRACES)/$(2)/$(3)/$(DEVICE)
$(1)-traces: $$(addprefix $$($(1)_DIR)/,$$(addsuffix .parquet,$(4)))
$(1): install $(1)-traces
	$$(SIM) sweep $$($(1)_DIR) --out $(RESULTS)/$(1) $(5) $$(SWEEP_OPTS)
	$$(SIM) report $(RESULTS)/$(1) --out $(RESULTS)/$(1)/report
	@echo "report: $(RESULTS)/$(1)/report/report.md"
$$($(1)_DIR)/%.parquet: | install
	$$(TRACE) run --dataset $(2) --model $(3) --method $$* --device $$(DEVICE) --out $$(@D) --name $$* \
	    --domains $$(PAPER_DOMAINS) $$(if $$(MAX_BATCHES),--max-batches $$(MAX_BATCHES)) \
	    $$(if $$(DATA),--data-root $$(DATA)) $$(if $$(WEIGHTS),--weights $$(WEIGHTS)) $$(TRACE_OPTS) \
	    $$(if $$(wildcard $$(@D)/$$*.partial),--resume)
endef
$(eval $(call study,paper,imagenet-c,resnet50,$(PAPER_METHODS),$(PAPER_SWEEP_OPTS)))
$(eval $(call study,paper-vit,imagenet-c,vit_base_patch16_224,$(PAPER_VIT_METHODS),$(PAPER_VIT_SWEEP_OPTS)))
$(eval $(call study,paper-cifar,cifar10-c,cifar-resnet18,$(PAPER_CIFAR_METHODS),$(PAPER_CIFAR_SWEEP_OPTS)))

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache
