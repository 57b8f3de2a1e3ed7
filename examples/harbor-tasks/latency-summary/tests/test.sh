#!/bin/bash
# Two metrics, both kept by Harbor: is the summary right, and is it well formed.
python3 /tests/grade.py /app/summary.json > /logs/verifier/reward.json
