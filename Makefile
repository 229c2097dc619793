# Two commands on a fresh machine: `make book` and `make test` (see README.md).
# Both create .venv and install the pinned development requirements when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# MathJax served by the site itself (from the npm registry, pinned): pages render math offline.
MATHJAX_VERSION := 3.2.2
MATHJAX := _build/vendor/static/mathjax/tex-mml-chtml.js
# MathJax 2.7.7, the version nbconvert's HTML template configures: the Colab copies of the chapters
# are rendered as plain Jupyter renders them (tests/test_colab.py), offline.
MATHJAX2_VERSION := 2.7.7
MATHJAX2 := _build/vendor/mathjax2/MathJax.js
# Chromium drives the browser check of the website; bubblewrap sandboxes student code.
SYSDEPS := chromium chromium-driver bubblewrap

.PHONY: setup sysdeps book test test-fast release clean

setup: $(STAMP) sysdeps $(MATHJAX) $(MATHJAX2)

# torch==2.13.0 goes first: asked for any other way, pip fetches gigabytes of CUDA wheels.
$(STAMP): requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# System packages, installed only when missing (needs root, as on the course machines and CI).
sysdeps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(MATHJAX):
	rm -rf _build/vendor/npm _build/vendor/static/mathjax
	mkdir -p _build/vendor/npm _build/vendor/static/mathjax/input/tex
	npm install --silent --no-audit --no-fund --prefix _build/vendor/npm mathjax@$(MATHJAX_VERSION)
	cd _build/vendor/npm/node_modules/mathjax/es5 && \
	  cp -r tex-mml-chtml.js output ui a11y $(CURDIR)/_build/vendor/static/mathjax/ && \
	  cp -r input/tex/extensions $(CURDIR)/_build/vendor/static/mathjax/input/tex/
	rm -rf _build/vendor/npm

$(MATHJAX2):
	rm -rf _build/vendor/npm2 _build/vendor/mathjax2
	mkdir -p _build/vendor/npm2 _build/vendor/mathjax2/jax/output _build/vendor/mathjax2/fonts/HTML-CSS/TeX
	npm install --silent --no-audit --no-fund --prefix _build/vendor/npm2 mathjax@$(MATHJAX2_VERSION)
	cd _build/vendor/npm2/node_modules/mathjax && \
	  cp -r MathJax.js config extensions localization $(CURDIR)/_build/vendor/mathjax2/ && \
	  cp -r jax/input jax/element $(CURDIR)/_build/vendor/mathjax2/jax/ && \
	  cp -r jax/output/CommonHTML $(CURDIR)/_build/vendor/mathjax2/jax/output/ && \
	  cp -r fonts/HTML-CSS/TeX/woff $(CURDIR)/_build/vendor/mathjax2/fonts/HTML-CSS/TeX/
	rm -rf _build/vendor/npm2

# The website, executed (cached in _build/.jupyter_cache), warnings are errors.
book: setup
	$(VENV)/bin/jupyter-book build . --warningiserror --nitpick --keep-going

# Every test: unit, notebooks, grading, the book build and the browser check.
test: setup
	$(PY) -m pytest -n 2 --dist loadgroup

# Unit tests and course_lib's docstring examples (pyproject: --doctest-modules): everything not marked slow.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

# chapters/ and colab/ from solutions/ (nbgrader generate_assignment underneath); writes generated
# files only, and fails naming file and line where a hand-edited file names another repository.
release: $(STAMP)
	$(PY) -m publish release

clean:
	rm -rf _build
