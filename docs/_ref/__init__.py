"""The reference pages' generators (run by ``docs/gen_ref.py`` at build time, and by
``tests/docs/test_reference.py``): each reads the code's own list and renders one page."""
