"""course_lib: the shared library of the course "Attention, Transformers and Scaling".

Every chapter notebook imports it. It holds the reference implementations the chapters teach,
the synthetic data generators, training loops, plotting helpers and the grading helpers used
by the hidden tests. Importing it has no side effects (no printing, no seeding, no downloads).
"""

from course_lib.utils import get_device, quick_mode, seed_everything

__version__ = "0.1.0"

__all__ = ["get_device", "seed_everything", "quick_mode", "__version__"]
