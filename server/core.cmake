# Owned by the worker-core work.
