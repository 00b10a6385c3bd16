"""Exercises of the tutorial's notebooks and their reference solutions.

One module per notebook (``nb01`` ... ``nb05``). A notebook states an exercise and points here;
the solution lives in this package so that it stays out of the learner's way and a test can
check it.
"""
