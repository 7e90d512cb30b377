"""Routes of the demo model in Gemini's shape; included at ``demo-model/`` (base URL ``/demo-model``)."""

from django.urls import re_path

from conversations import demo_model_views

urlpatterns = [
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):generateContent$",
        demo_model_views.generate_content,
        name="demo-model-gemini-generate",
    ),
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):streamGenerateContent$",
        demo_model_views.stream_generate_content,
        name="demo-model-gemini-stream",
    ),
]
