"""Exercises, checks, student editions and grading for the course notebooks."""
