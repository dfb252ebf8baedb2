#!/bin/bash
set -e
cat > count.sh <<'EOF'
#!/bin/bash
total=0
for f in "$1"/*.txt; do
  n=$(wc -l < "$f")
  total=$((total + n))
done
echo $total
EOF
