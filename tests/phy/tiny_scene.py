"""A tiny ray-tracing scene the tests write: a 200 m x 200 m ground at z = 0 and one
closed 10 m x 10 m x 10 m concrete building at x in [20, 30], y in [-5, 5] (Wavefront OBJ
meshes and a Mitsuba XML that names them)."""

from __future__ import annotations

from pathlib import Path

BUILDING = (20.0, 30.0, -5.0, 5.0, 0.0, 10.0)
"""x0, x1, y0, y1, z0, z1 [m] of the building."""

_XML = """<scene version="2.1.0">
<bsdf type="itu-radio-material" id="concrete">
  <string name="type" value="concrete"/><float name="thickness" value="0.2"/>
</bsdf>
<shape type="obj" id="ground">
  <string name="filename" value="ground.obj"/><boolean name="face_normals" value="true"/>
  <ref id="concrete" name="bsdf"/>
</shape>
<shape type="obj" id="building">
  <string name="filename" value="building.obj"/><boolean name="face_normals" value="true"/>
  <ref id="concrete" name="bsdf"/>
</shape>
</scene>
"""


def _box(x0: float, x1: float, y0: float, y1: float, z0: float, z1: float) -> str:
    vertices = [(x, y, z) for z in (z0, z1) for y in (y0, y1) for x in (x0, x1)]
    faces = [(1, 3, 4, 2), (5, 6, 8, 7), (1, 2, 6, 5), (3, 7, 8, 4), (1, 5, 7, 3), (2, 4, 8, 6)]
    return ("".join(f"v {x} {y} {z}\n" for x, y, z in vertices)
            + "".join("f " + " ".join(map(str, face)) + "\n" for face in faces))


def write_scene(directory: Path, name: str = "scene.xml") -> Path:
    """The scene's XML and meshes in ``directory``; the XML's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ground.obj").write_text("v -100 -100 0\nv 100 -100 0\nv 100 100 0\nv -100 100 0\nf 1 2 3 4\n")
    (directory / "building.obj").write_text(_box(*BUILDING))
    path = directory / name
    path.write_text(_XML)
    return path
