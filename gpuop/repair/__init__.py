"""The repair: a node's plan from its judgment (`plan`, pure) and its cordon, drain, probe Pod and lock
through the API server (`drain`).
"""
