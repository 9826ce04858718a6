"""Rich renderables that size themselves to the width they are given: plots, bars, waterfalls."""
