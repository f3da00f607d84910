import CartStore; import OpenCombine; print(1)
