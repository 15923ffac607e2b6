import os
import sys

# Tests import the project's modules (gpuop, facts, operations) from the repository root.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.chdir(ROOT)
