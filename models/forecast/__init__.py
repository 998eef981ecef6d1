"""Load forecasting: request rate and token mix, online, with 90% intervals.

``LoadForecaster`` is what the control loop uses; ``AutoForecaster`` forecasts one series; the
models (``baselines``, ``ets``, ``arima``, ``llt``, ``ensemble``) and the Dynamo planner's predictors
(``anchors``) share the ``PointForecaster`` interface; ``benchmarks/forecast.py`` compares them.
"""

from models.forecast.auto import AutoForecaster, Forecast
from models.forecast.load import LoadForecast, LoadForecaster, QuantityForecast

__all__ = ["AutoForecaster", "Forecast", "LoadForecast", "LoadForecaster", "QuantityForecast"]
