"""Packing: conversion, sources, manifests, archives, COCO, encoding, fields on the pack
side, append, dedup, stats, splits."""
