"""The data: dataset files checked before they are read (:mod:`.files`, no NumPy arrays
made), the datasets (:mod:`.datasets`) and their split over the devices
(:mod:`.partition`). Importing the package imports none of them.
"""
