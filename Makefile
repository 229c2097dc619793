# Two commands on a fresh machine: `make book` and `make test` (see README.md).
# Both create .venv and install the pinned development requirements when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# MathJax typesets the formulas at build time (_ext/course_pages.py runs mathjax-full in Node, from
# the npm registry, pinned): pages load no MathJax script, only the CommonHTML fonts they draw,
# served by the site (offline). The browser bundle (es5/) stays in node_modules for the browser
# check's own test pages.
MATHJAX_VERSION := 3.2.2
MATHJAX := _build/vendor/mathjax-node/node_modules/mathjax-full/js/mathjax.js
# MathJax 2.7.7, the version nbconvert's HTML template configures: the Colab copies of the chapters
# are rendered as plain Jupyter renders them (tests/test_colab.py), offline.
MATHJAX2_VERSION := 2.7.7
MATHJAX2 := _build/vendor/mathjax2/MathJax.js
# axe-core (from the npm registry, pinned) checks every page of the website against WCAG 2.0/2.1
# A and AA in the browser test (scripts/site_audit.py injects it); no browser is downloaded.
AXE_VERSION := 4.14.1
AXE := _build/vendor/axe/axe.min.js
# Chromium drives the browser check of the website; bubblewrap sandboxes student code.
SYSDEPS := chromium chromium-driver bubblewrap

.PHONY: setup sysdeps book test test-fast lint release clean

setup: $(STAMP) sysdeps $(MATHJAX) $(MATHJAX2) $(AXE)

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
	rm -rf _build/vendor/mathjax-node _build/vendor/static/mathjax
	mkdir -p _build/vendor/mathjax-node _build/vendor/static/mathjax/output/chtml/fonts
	npm install --silent --no-audit --no-fund --prefix _build/vendor/mathjax-node mathjax-full@$(MATHJAX_VERSION)
	cp -r _build/vendor/mathjax-node/node_modules/mathjax-full/es5/output/chtml/fonts/woff-v2 \
	  _build/vendor/static/mathjax/output/chtml/fonts/

$(AXE):
	rm -rf _build/vendor/npm-axe _build/vendor/axe
	mkdir -p _build/vendor/npm-axe _build/vendor/axe
	npm install --silent --no-audit --no-fund --prefix _build/vendor/npm-axe axe-core@$(AXE_VERSION)
	cp _build/vendor/npm-axe/node_modules/axe-core/axe.min.js _build/vendor/npm-axe/node_modules/axe-core/LICENSE $(CURDIR)/_build/vendor/axe/
	rm -rf _build/vendor/npm-axe

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

# Every test: ruff and mypy (as make lint), unit, notebooks, grading, the book build and the browser
# check.
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -n 2 --dist loadgroup --durations=40

# Unit tests and course_lib's docstring examples (pyproject: --doctest-modules): everything not marked slow.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

# ruff over the repository's Python files and mypy --strict over course_lib (pyproject.toml:
# [tool.ruff], [tool.mypy]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# chapters/ and colab/ from solutions/ (nbgrader generate_assignment underneath); writes generated
# files only, and fails naming file and line where a hand-edited file names another repository.
release: $(STAMP)
	$(PY) -m publish release

clean:
	rm -rf _build
