"""Tests of magpy.graphs: operator recording, dynamic shapes and lifted scalars, control flow on
tensor data as operators, random numbers as eager draws them."""
